-- purge (operator.purge): empty the line and the pre-queue; passes, sessions and the room survive.
local early = begin(false, true)
if early then
  return early
end
if not advance() then
  return done({k = 'again'})
end
local numbers = redis.call('ZRANGE', K.line, 0, -1)
redis.call('UNLINK', K.line, K.ll)
feed('c')
for _, m in ipairs(numbers) do
  local t = getT(tonumber(m))
  if t ~= nil then
    finish(t, 'purged')
  end
end
redis.call('UNLINK', K.pi)
local handles = redis.call('ZRANGE', K.pqo, 0, -1)
for _, h in ipairs(handles) do
  S.phseq = (S.phseq or 0) + 1
  redis.call('ZADD', K.ph, I(S.phseq), h)
end
local extra = redis.call('ZCARD', K.ph) - FINISHED_KEEP
if extra > 0 then
  redis.call('ZPOPMIN', K.ph, extra)
end
if #handles > 0 then
  S.pqver = (S.pqver or 0) + 1
end
redis.call('UNLINK', K.pq, K.pqo, K.ppi)
local count = #numbers + #handles
emit('purge', {count = count})
return done({k = 'ok', count = count})
