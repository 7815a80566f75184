-- upsert (Engine.upsert): the config was validated in Python (model.apply_fields) against the
-- config of version WANT_CV; it is written only if that is still the current version (else the
-- reply carries the current config and the store tries again).
-- ARGV after the header: mode (create|update), room id, config JSON, the CONFIG_FIELDS,
-- clocks changed (1/0), state or rate changed (1/0), rule map (JSON: old index per new rule, -1 none),
-- the new drop's seed and its commitment (hex; '' when this change commits none).
local mode = ARGV[A + 1]
local room_id = ARGV[A + 2]
local cfg = ARGV[A + 3]
if mode == 'create' then
  if redis.call('EXISTS', K.fence) == 1 then
    return redis.error_reply('QM fenced')
  end
  if redis.call('EXISTS', K.st) == 1 then
    return cjson.encode({k = 'conflict'})
  end
  for _, name in ipairs(LIVE) do
    redis.call('UNLINK', K[name])
  end
  S.gen = redis.call('HINCRBY', K.meta, 'gen', 1)
  S.cv = redis.call('HINCRBY', K.meta, 'cv', 1)
  S.next = 1
  S.credit = 0
  S.last = NOW
  S.created = NOW_WALL
  S.seq = 0
  S.lseq = 0
  S.joins = 0
  S.passes = 0
  S.wsum = 0
  S.unscoped = 0
  S.blocked = 0
  S.refused = 0
  S.srev = 0
  S.ejected = 0
  S.pqver = 0
  local c = set_config(A + 4)
  redis.call('SET', K.cfg, cfg)
  commit_draw(ARGV[c + 3], ARGV[c + 4])
  emit('room.create', {})
  CFG_OUT = true
  return done({k = 'ok', created = true})
end

local early = begin(true, true)
if early then
  return early
end
if not advance() then
  return done({k = 'again'})
end
local lanes_before = S.c_lanes
local i = set_config(A + 4)
if S.c_lanes ~= lanes_before then
  regroup_lanes()
end
local clocks_changed = ARGV[i] == '1'
local rate_or_state_changed = ARGV[i + 1] == '1'
local rule_map = cjson.decode(ARGV[i + 2])
-- rule statistics follow a rule whose (id, pattern, action) is unchanged
local old = redis.call('HGETALL', K.rst)
local old_stats = {}
for j = 1, #old, 2 do
  old_stats[tonumber(old[j])] = old[j + 1]
end
redis.call('UNLINK', K.rst)
for j, oi in ipairs(rule_map) do
  if oi >= 0 and old_stats[oi] ~= nil then
    redis.call('HSET', K.rst, I(j - 1), old_stats[oi])
  end
end
redis.call('SET', K.cfg, cfg)
S.cv = redis.call('HINCRBY', K.meta, 'cv', 1)
if clocks_changed then
  reschedule()
end
if rate_or_state_changed then
  S.last = math.max(S.last, NOW)
  if S.c_state ~= 'active' then
    S.credit = math.min(S.credit, SLOT)
  end
end
commit_draw(ARGV[i + 3], ARGV[i + 4])
emit('room.update', {})
CFG_OUT = true
return done({k = 'ok', created = false})
