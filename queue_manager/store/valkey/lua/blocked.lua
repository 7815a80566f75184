-- note_blocked_return: count a refused return URL (no advance, no event).
if redis.call('EXISTS', K.st) == 1 then
  redis.call('HINCRBY', K.st, 'blocked', 1)
end
return cjson.encode({k = 'ok'})
