-- shard_take (a FIFO room's join shard, line_merge.py): the joins stamped at or before the watermark ARGV[A + 1]
-- (wall ms), each its stored record (JSON text), in the shard's order, for the room's next round. A pure
-- read: the entries stay until the room holds them (shard_drain.lua).
local refused = open_room()
if refused then
  return refused
end
if not is_shard() then
  return redis.error_reply('QM not_a_shard')
end
local w = tonumber(ARGV[A + 1])
local handles = redis.call('ZRANGE', K.pqo, 0, -1)
local out = {}
if #handles > 0 then
  for _, raw in ipairs(redis.call('HMGET', K.pq, unpack(handles))) do
    if raw and cjson.decode(raw).j <= w then
      out[#out + 1] = raw
    end
  end
end
return cjson.encode({k = 'ok', entries = out})
