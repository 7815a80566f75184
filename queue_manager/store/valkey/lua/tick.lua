-- tick (outflow.tick): credit the time since the room's shared last tick and promote. N instances
-- ticking one room each claim the span since the last claim, so together they credit what one
-- ticker would. Answers 'more' (credit not yet capped) when PROMOTE_MAX promotions were made and
-- more may follow, and 'again' when the sweep budget ran out: the store calls again at once.
local early = begin(false, true)
if early then
  return early
end
local now = NOW
local elapsed = math.max(0, now - S.last)
S.last = math.max(S.last, now)
if DRAW_NOW then
  DRAW_NOW = false
  apply_draw()
end
local state = effective_state(NOW_WALL)
local moving = state == 'active' and S.c_rate > 0
if moving then
  S.credit = S.credit + S.c_rate * elapsed
end
BUDGET = SWEEP_MAX
if not sweep(now) then
  return done({k = 'again', p = 0})
end
local cutoff = now - 60000
redis.call('ZREMRANGEBYSCORE', K.jt, '-inf', I(cutoff))
redis.call('ZREMRANGEBYSCORE', K.pt, '-inf', I(cutoff))
arrivals_last_minute()  -- drops the bypass arrival fields that left the window
local promoted = 0
while moving do
  if promoted >= PROMOTE_MAX then
    return done({k = 'more', p = promoted})
  end
  local head = line_head()
  if head == nil then
    break
  end
  local t = getT(head)
  if absent(t.sn, now) then
    promote(t, false, now)
    promoted = promoted + 1
  else
    if S.credit < SLOT then
      break
    end
    local free = free_slots(now, nil)
    if free ~= nil and free <= 0 then
      break
    end
    S.credit = S.credit - SLOT
    promote(t, true, now)
    promoted = promoted + 1
  end
end
if S.credit > SLOT then
  S.credit = SLOT  -- the one-slot bank
end
return done({k = 'ok', p = promoted})
