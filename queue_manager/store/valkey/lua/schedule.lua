-- schedule (Engine.schedule): opensAt / preQueueMaxPerIp, validated in Python against config
-- version WANT_CV. Cancelling a drop (cancelled = 1) draws the pre-queue at once.
-- ARGV after the header: config JSON, the CONFIG_FIELDS, cancelled (1/0), the new drop's seed and
-- its commitment (hex; '' when this change commits none).
local early = begin(true, false)
if early then
  return early
end
local cancelled = ARGV[A + 2 + #CONFIG_FIELDS] == '1'
local due = draw_due()
if due or (cancelled and redis.call('HLEN', K.pq) > 0) then
  if not draw_ready() then
    return draw_reply()
  end
  DRAW_NOW = due
end
if not advance() then
  return done({k = 'again'})
end
set_config(A + 2)
redis.call('SET', K.cfg, ARGV[A + 1])
S.cv = redis.call('HINCRBY', K.meta, 'cv', 1)
if cancelled and redis.call('HLEN', K.pq) > 0 then
  apply_draw()
end
commit_draw(ARGV[A + 3 + #CONFIG_FIELDS], ARGV[A + 4 + #CONFIG_FIELDS])
emit('room.schedule', {})
CFG_OUT = true
return done({k = 'ok'})
