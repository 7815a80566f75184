-- purge (operator.purge): empty the line and the pre-queue; passes, sessions and the room survive. The
-- line is moved aside at once (to K.fq) and its tickets finished in parts of DRAW_CHUNK (finish_step, the
-- first here, the others by the next calls of the room, as a large draw's), so a line of a million never
-- keeps Valkey from everyone else for long. Of the pre-queue only the last FINISHED_KEEP handles are kept
-- as purged, as before.
local early = begin(false, true)
if early then
  return early
end
if not advance() then
  return done({k = 'again'})
end
local waiting = redis.call('ZCARD', K.line)
local entries = redis.call('ZCARD', K.pqo)
local kept = redis.call('ZRANGE', K.pqo, -FINISHED_KEEP, -1)
local before = S.phseq or 0
S.phseq = before + entries
for i, h in ipairs(kept) do
  redis.call('ZADD', K.ph, I(before + entries - #kept + i), h)
end
local extra = redis.call('ZCARD', K.ph) - FINISHED_KEEP
if extra > 0 then
  redis.call('ZPOPMIN', K.ph, extra)
end
if entries > 0 then
  S.pqver = (S.pqver or 0) + 1
end
redis.call('UNLINK', K.pq, K.pqo, K.ppi, K.pi, K.ll)
feed('c')
if waiting > 0 then
  redis.call('RENAME', K.line, K.fq)
  finish_in_parts('purged')
end
local count = waiting + entries
emit('purge', {count = count})
return done({k = 'ok', count = count})
