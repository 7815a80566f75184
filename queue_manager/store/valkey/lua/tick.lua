-- tick (outflow.tick): credit the time since the room's shared last tick and promote. N instances
-- ticking one room each claim the span since the last claim, so together they credit what one
-- ticker would. Answers 'more' (credit not yet capped) when PROMOTE_MAX promotions were made and
-- more may follow, and 'again' when the sweep budget ran out: the store calls again at once.
-- ARGV after the header: the salt of this tick's random draws (queueing random; engine/release.py).
-- The room's queueing method picks whom it promotes (outflow.tick): fifo the head, random a holder
-- drawn from those waiting and present, passthrough everyone waiting (no slot), reject nobody.
local early = begin(false, true)
if early then
  return early
end
local now = NOW
local last_tick = S.last
local elapsed = math.max(0, now - S.last)
S.last = math.max(S.last, now)
if DRAW_NOW then
  DRAW_NOW = false
  apply_draw()
  if S.dro ~= nil then  -- a large draw, in parts: this tick's span is credited once the line is whole
    S.last = last_tick
    return done({k = 'parts'})
  end
end
local state = effective_state(NOW_WALL)
local method = S.c_qm or 'fifo'
local salt = ARGV[A + 1] or ''
local moving = state == 'active' and S.c_rate > 0 and method ~= 'reject' and method ~= 'passthrough'
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
if method == 'passthrough' and state == 'active' then  -- outflow._pass_everyone
  while true do
    if promoted >= PROMOTE_MAX then
      return done({k = 'more', p = promoted})
    end
    local head = line_head()
    if head == nil then
      break
    end
    promote(getT(head), false, now)
    promoted = promoted + 1
  end
end
-- a room with lanes (outflow._lanes_fifo, outflow._lanes_random): the absent at each lane's head go
-- through free, then each release picks its lane (pick_lane) and promotes that lane's head, or a holder
-- drawn from that lane (a lane whose draw finds nobody present sits out the rest of the tick)
if moving and has_lanes() then
  local L = lanes()
  local random = method == 'random'
  if not random then
    promoted = promoted + clear_absent_heads(now, PROMOTE_MAX - promoted)
  end
  local dry = {}
  while S.credit >= SLOT do
    if promoted >= PROMOTE_MAX then
      return done({k = 'more', p = promoted})
    end
    local ready = {}
    local any = false
    for j, lane in ipairs(L.list) do
      if not dry[lane.id] and lane_len(j - 1) > 0 then
        ready[lane.id] = true
        any = true
      end
    end
    if not any then
      break
    end
    local free = free_slots(now, nil)
    if free ~= nil and free <= 0 then
      break
    end
    if random and salt == '' then
      break
    end
    local id = pick_lane(ready)
    local i = L.idx[id]
    if random then
      local size = lane_len(i)
      local picked = nil
      for attempt = 0, 31 do  -- release.DRAW_TRIES
        local u = tonumber(string.sub(redis.sha1hex(salt .. ':' .. I(S.passes) .. ':' .. attempt), 1, 8), 16)
        if u < math.floor(4294967296 / size) * size then
          local t = getT(lane_nth(i, u % size))
          if not absent(t.sn, now) then
            picked = t
            break
          end
        end
      end
      if picked == nil then
        dry[id] = true
      else
        S.credit = S.credit - SLOT
        promote(picked, true, now)
        promoted = promoted + 1
      end
    else
      S.credit = S.credit - SLOT
      promote(getT(lane_head(i)), true, now)
      promoted = promoted + 1
      promoted = promoted + clear_absent_heads(now, PROMOTE_MAX - promoted)
    end
  end
  moving = false
end
-- random (outflow._draw, release.draw_index): the place drawn for try i of release S.passes is the first
-- 32 bits of SHA-1('<salt>:<passes>:<i>') mod the line's length, past the unbiased cut thrown away;
-- an absent holder is left in line and the next try made
local SPAN = 4294967296
local DRAW_TRIES = 32  -- release.DRAW_TRIES
while moving and method == 'random' and salt ~= '' do
  if promoted >= PROMOTE_MAX then
    return done({k = 'more', p = promoted})
  end
  local size = line_len()
  if size == 0 or S.credit < SLOT then
    break
  end
  local free = free_slots(now, nil)
  if free ~= nil and free <= 0 then
    break
  end
  local picked = nil
  for attempt = 0, DRAW_TRIES - 1 do
    local u = tonumber(string.sub(redis.sha1hex(salt .. ':' .. I(S.passes) .. ':' .. attempt), 1, 8), 16)
    if u < math.floor(SPAN / size) * size then
      local r = redis.call('ZRANGE', K.line, u % size, u % size)
      local t = getT(tonumber(r[1]))
      if not absent(t.sn, now) then
        picked = t
        break
      end
    end
  end
  if picked == nil then
    break
  end
  S.credit = S.credit - SLOT
  promote(picked, true, now)
  promoted = promoted + 1
end
while moving and method == 'fifo' do
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
