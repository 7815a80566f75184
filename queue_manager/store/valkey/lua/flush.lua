-- flush (operator.flush = advance + release_all): every pass and live session ends at once, each ticket
-- finished ('flushed'); the line, the pre-queue and the room survive. One event for the lot, and the
-- deadline heaps go whole: every entry in them names a pass, a slot or a session, and none is left.
local early = begin(false, true)
if early then
  return early
end
if not advance() then
  return done({k = 'again'})
end
local numbers = redis.call('SUNION', K.ps, K.ss)
local sorted = {}
for i, m in ipairs(numbers) do
  sorted[i] = tonumber(m)
end
table.sort(sorted)
for _, n in ipairs(sorted) do
  local t = getT(n)
  if t ~= nil then
    finish(t, 'flushed')
  end
end
redis.call('UNLINK', K.ps, K.ss, K.sl, K.bn, K.hp, K.hs, K.he)
emit('flush', {count = #sorted})
return done({k = 'ok', count = #sorted})
