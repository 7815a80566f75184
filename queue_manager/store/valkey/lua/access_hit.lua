-- note_access_match: count a match of one access rule (ARGV[A + 1]: the rule's key) and when it was
-- (no advance, no event). A room that is gone counts nothing.
if redis.call('EXISTS', K.st) == 1 then
  local key = ARGV[A + 1]
  redis.call('HINCRBY', K.ast, key, 1)
  redis.call('HSET', K.ast, key .. '@', I(NOW_WALL))
end
return cjson.encode({k = 'ok'})
