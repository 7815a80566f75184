-- stats (Room.stats, after advance): the raw numbers; Python derives the rest. Also the plain
-- advance the engine runs before a refused schedule (ARGV after the header: 'advance' to skip
-- the numbers), and the drop's draw after an advance ('draw').
local early = begin(false, true)
if early then
  return early
end
if not advance() then
  return done({k = 'again'})
end
if ARGV[A + 1] == 'advance' then
  return done({k = 'ok'})
end
if ARGV[A + 1] == 'draw' then  -- the drop's draw (GET /api/rooms/<id>/draw)
  return done({k = 'ok', eff = effective_state(NOW_WALL), pq = redis.call('HLEN', K.pq),
    draw = redis.call('HGETALL', K.draw)})
end
local cutoff = NOW - 60000
redis.call('ZREMRANGEBYSCORE', K.jt, '-inf', I(cutoff))
redis.call('ZREMRANGEBYSCORE', K.pt, '-inf', I(cutoff))
local head = line_head()
local head_joined = nil
if head ~= nil then
  head_joined = getT(head).j
end
local rules = {}
local nrules = S.c_rules or 0
for i = 0, nrules - 1 do
  local cur = redis.call('HGET', K.rst, I(i))
  if cur then
    local m, last = string.match(cur, '^(%d+):(%d*)$')
    rules[#rules + 1] = {tonumber(m), tonumber(last)}
  else
    rules[#rules + 1] = {0}
  end
end
return done({
  k = 'ok',
  eff = effective_state(NOW_WALL),
  waiting = line_len(),
  pq = redis.call('HLEN', K.pq),
  sessions = redis.call('SCARD', K.ss),
  passes = redis.call('SCARD', K.ps),
  slots = redis.call('SCARD', K.sl),
  jlm = redis.call('ZCARD', K.jt) + arrivals_last_minute(),
  plm = redis.call('ZCARD', K.pt),
  head_joined = head_joined,
  joins = S.joins,
  passes_total = S.passes,
  created = S.created,
  unscoped = S.unscoped,
  blocked = S.blocked,
  rules = rules,
})
