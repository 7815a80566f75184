-- flush (operator.flush = advance + release_all): every pass and live session ends at once, each ticket
-- finished ('flushed'); the line, the pre-queue and the room survive. One event for the lot, and the
-- deadline heaps go whole: every entry in them names a pass, a slot or a session, and none is left. The
-- pass and session sets are emptied at once and their tickets finished in parts of DRAW_CHUNK, in number
-- order (finish_step: the first part here, the rest by the room's next calls).
local early = begin(false, true)
if early then
  return early
end
if not advance() then
  return done({k = 'again'})
end
local numbers = redis.call('SUNION', K.ps, K.ss)
local scored = {}
for _, m in ipairs(numbers) do
  scored[#scored + 1] = m
  scored[#scored + 1] = m
end
chunked('ZADD', K.fq, scored, 512)
redis.call('UNLINK', K.ps, K.ss, K.sl, K.bn, K.hp, K.hs, K.he)
emit('flush', {count = #numbers})
if #numbers > 0 then
  finish_in_parts('flushed')
end
return done({k = 'ok', count = #numbers})
