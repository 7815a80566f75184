-- access_prune: after a save changed the room's access rules, drop the counters (K.ast) of every rule the
-- room no longer has (ARGV after the header: the keys of its rules now). No advance, no event.
local keep = {}
for i = A + 1, #ARGV do
  keep[ARGV[i]] = true
end
for _, f in ipairs(redis.call('HKEYS', K.ast)) do
  local base = (string.gsub(f, '@$', ''))
  if not keep[base] then
    redis.call('HDEL', K.ast, f)
  end
end
return cjson.encode({k = 'ok'})
