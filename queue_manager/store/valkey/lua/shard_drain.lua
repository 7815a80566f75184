-- shard_drain (a pre-queue shard, shards.py): the entries its room now holds (prequeue_merge.lua, committed)
-- leave the shard, as a taken-back sign-up leaves a pre-queue, journaled as one prequeue.drain. ARGV after
-- the header: reopen ('1': the shard takes sign-ups again after this call), then the handles.
local refused = open_room()
if refused then
  return refused
end
if not is_shard() then
  return redis.error_reply('QM not_a_shard')
end
local gone = {}
for i = A + 2, #ARGV do
  local h = ARGV[i]
  local raw = redis.call('HGET', K.pq, h)
  if raw then
    local e = cjson.decode(raw)
    redis.call('HDEL', K.pq, h)
    redis.call('ZREM', K.pqo, h)
    uncharge(K.ppi, e.id)
    redis.call('ZREM', K.jt, 'h' .. h)
    S.joins = S.joins - 1
    gone[#gone + 1] = h
  end
end
if #gone > 0 then
  S.pqver = (S.pqver or 0) + 1
  emit('prequeue.drain', {h = gone})
end
if ARGV[A + 1] == '1' then
  S.sld = nil
end
return done({k = 'ok', count = #gone})
