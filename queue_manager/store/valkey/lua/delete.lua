-- delete (Engine.delete): the generation ends. Its Refs (tickets 1..ARCHIVE_TICKETS) are kept in
-- archive slot gen % GENERATIONS_KEPT for previous_generation look-ups. ARGV after the header: room id.
local refused = open_room()
if refused then
  return refused
end
emit('room.delete', {})
local slot = S.gen % #ARCH
local archive = ARCH[slot + 1]
redis.call('UNLINK', archive)
if redis.call('EXISTS', K.aref) == 1 then
  redis.call('RENAME', K.aref, archive)
end
redis.call('HSET', K.meta, 'a' .. I(slot), I(S.gen))
for _, name in ipairs(LIVE) do
  redis.call('UNLINK', K[name])
end
outbox(tonumber(S_raw.gen) or 0)
redis.call('SPUBLISH', K.lf, 'x')  -- every replica of the line starts over (keys.py, lf)
return cjson.encode({k = 'ok', ev = EV, gen = S_raw.gen})
