-- The room's config version (and the config when the caller's copy is older), for the reads that
-- need the config but no advance: room_policy, match_rule, and the read before an upsert or a
-- schedule. ARGV after the header: 1 to include the rule statistics.
if redis.call('EXISTS', K.fence) == 1 then
  return redis.error_reply('QM fenced')
end
local st = redis.call('HMGET', K.st, 'cv', 'gen')
if not st[1] then
  return cjson.encode({k = 'none'})
end
local out = {k = 'ok', cv = tonumber(st[1]), gen = tonumber(st[2])}
if WANT_CV ~= st[1] then
  out.cfg = redis.call('GET', K.cfg)
end
if ARGV[A + 1] == '1' then
  out.rst = redis.call('HGETALL', K.rst)
end
return cjson.encode(out)
