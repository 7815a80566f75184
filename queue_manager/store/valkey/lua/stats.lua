-- stats (report.stats, after advance): the raw numbers; Python derives the rest. Also the plain
-- advance the engine runs before a refused schedule (ARGV after the header: 'advance' to skip
-- the numbers), and the drop's draw after an advance ('draw'). After 'stats', an optional reader's
-- cursor: the waits of the latest passes it has not read (K.wt past '<gen>:<ordinal>'; '*' or another
-- generation: every one kept), as wt (ms, oldest first; the last is pass number passes_total), and wsum:
-- the sum of the waits of every pass of the generation.
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
local wt = nil
local after = ARGV[A + 2]
if after ~= nil then
  local fresh = redis.call('LLEN', K.wt)
  local g, k = string.match(after, '^(%d+):(%d+)$')
  if g ~= nil and tonumber(g) == S.gen then
    fresh = math.max(0, math.min(fresh, S.passes - tonumber(k)))
  end
  wt = {}
  if fresh > 0 then
    wt = redis.call('LRANGE', K.wt, -fresh, -1)
  end
end
-- each lane's waiting and its releases of the last minute (report.lane_counts; K.pt members 'p<seq>:<lane>')
local lane_rows = nil
if has_lanes() then
  lane_rows = {}
  local released = {}
  for _, m in ipairs(redis.call('ZRANGE', K.pt, 0, -1)) do
    local ln = string.match(m, '^p%d+:(.+)$')
    if ln then
      released[ln] = (released[ln] or 0) + 1
    end
  end
  for j, lane in ipairs(lanes().list) do
    lane_rows[j] = {lane_len(j - 1), released[lane.id] or 0}
  end
end
return done({
  k = 'ok',
  lanes = lane_rows,
  wt = wt,
  wsum = S.wsum or 0,
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
  refused = S.refused or 0,
  srev = S.srev or 0,
  rules = rules,
  ast = redis.call('HGETALL', K.ast),
})
