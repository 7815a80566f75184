-- export_room: the room generation's whole state, raw (Python writes the checkpoint document).
-- A pure read: no advance, no event.
if not load_state() then
  return redis.error_reply('QM no_room')
end
if parts_pending() then  -- a draw, a purge, a flush or a change of lanes half applied: no document of it
  return redis.error_reply('QM parts')
end
return cjson.encode({
  k = 'ok',
  now_wall = NOW_WALL,
  now_mono = NOW,
  st = redis.call('HGETALL', K.st),
  cfg = redis.call('GET', K.cfg),
  t = redis.call('HGETALL', K.t),
  line = redis.call('ZRANGE', K.line, 0, -1),
  fin = redis.call('HGETALL', K.fin),
  fo = redis.call('ZRANGE', K.fo, 0, -1),
  pq = redis.call('HGETALL', K.pq),
  pqo = redis.call('ZRANGE', K.pqo, 0, -1),
  drawn = redis.call('HGETALL', K.drawn),
  draw = redis.call('HGETALL', K.draw),
  ph = redis.call('ZRANGE', K.ph, 0, -1),
})
