-- shard_page (a pre-queue shard, shards.py): entries [from, from + count) of the shard's pre-queue in
-- join order, each its stored record (JSON text), for the store that merges the shard into its room. A
-- pure read. ARGV after the header: from (0-based), count.
local refused = open_shard()
if refused then
  return refused
end
local from = tonumber(ARGV[A + 1])
local handles = redis.call('ZRANGE', K.pqo, from, from + tonumber(ARGV[A + 2]) - 1)
local entries = {}
if #handles > 0 then
  for _, raw in ipairs(redis.call('HMGET', K.pq, unpack(handles))) do
    if raw then
      entries[#entries + 1] = raw
    end
  end
end
return cjson.encode({k = 'page', n = #handles, entries = entries})
