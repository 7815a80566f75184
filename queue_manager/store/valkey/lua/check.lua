-- check (visitor.check): the door. ARGV after the header: ident, fp, fp2, cookie, presented gen, n,
-- handle, door hash ('' none), url sent (1/0), matched rule index ('' none), unprotected (1/0),
-- new door hash. The URL rules are matched in Python against the config of the version this
-- script insists on (strict), so the match and the rules it counts are the same.
local early = begin(true, true)
if early then
  return early
end
if not advance() then
  return done({k = 'again'})
end
local C = client_at(A + 1)
local P = presented_at(A + 5)
local door = opt(ARGV[A + 8])
local url_sent = ARGV[A + 9] == '1'
local rule = opt(ARGV[A + 10])
local unprotected = ARGV[A + 11] == '1'
local new_door = ARGV[A + 12]
local now = NOW

-- a closed room (queueing reject): only a live session walks on; every other refusal is room_closed
local closed = S.c_qm == 'reject'
local function no(reply)
  if closed then
    reply.reason = 'room_closed'
  end
  return done(reply)
end

if is_shard() then
  -- a pre-queue shard answers a door check only for an entry it holds on a protected URL (as its room
  -- would: waiting), and counts nothing; anything else is its room's
  if (url_sent and unprotected) or P == nil or resolve(P, C).pre == nil then
    return done({k = 'moved'})
  end
  return no({k = 'ok', admit = false, reason = 'waiting'})
end
local state = effective_state(NOW_WALL)
if state == 'bypass' then
  count_arrival()
  return done({k = 'ok', admit = true, state = 'bypass'})
end
if not url_sent then
  S.unscoped = S.unscoped + 1
elseif rule ~= nil then
  count_rule(rule)
end
if url_sent and unprotected then
  return done({k = 'ok', admit = true, state = 'unprotected'})
end
if P == nil then
  return no({k = 'ok', admit = false, reason = 'no_ticket'})
end
local found = resolve(P, C)
if found.pre ~= nil then
  return no({k = 'ok', admit = false, reason = 'waiting'})
end
local t = nil
if found.n ~= nil then
  t = getT(found.n)
end
if t == nil then
  return no({k = 'ok', admit = false, reason = found.reason or 'expired'})
end
if t.s == 'admitted' then
  if door ~= nil and t.d ~= nil and door == t.d then
    slide(t, now, true)
    return done({k = 'ok', admit = true, state = 'admitted', t = T_raw[t.n], sx = NOW_WALL + (session_deadline(t) - now)})
  end
  if C.ck ~= nil and t.ck == C.ck then
    local undo = {reclaim = true, d = t.d, sla = t.sla}
    t.d = new_door
    slide(t, now, false)
    emit('admit', {n = t.n, door = new_door, reclaim = true})
    return done({
      k = 'ok', admit = true, state = 'admitted', dk = true, t = T_raw[t.n],
      sx = NOW_WALL + (session_deadline(t) - now), undo = undo,
    })
  end
  return no({k = 'ok', admit = false, reason = 'session_elsewhere', t = T_raw[t.n]})
end
if found.ticket == nil then
  return no({k = 'ok', admit = false, reason = found.reason or 'not_owner'})
end
if t.s == 'waiting' then
  local reason = 'waiting'
  if t.r == 'ejected' then
    reason = 'ejected'
  elseif state == 'paused' then
    reason = 'paused'
  end
  return no({k = 'ok', admit = false, reason = reason, t = T_raw[t.n]})
end
-- t.s == 'passed'
t.sn = now
if HOLD then  -- admission maintenance: the pass waits, unspent, until it is over
  return no({k = 'ok', admit = false, reason = 'paused', t = T_raw[t.n]})
end
if closed then  -- a pass handed out before the room closed is not spent
  return no({k = 'ok', admit = false, reason = 'room_closed', t = T_raw[t.n]})
end
if not t.sl then
  local free = free_slots(now, t.n)
  if free ~= nil and free <= 0 then
    t.ba = now
    redis.call('SADD', K.bn, I(t.n))
    emit('bounce', {n = t.n})
    return no({k = 'ok', admit = false, reason = 'at_capacity', t = T_raw[t.n]})
  end
end
local undo = {
  sl = t.sl, ba = t.ba, bn = redis.call('SISMEMBER', K.bn, I(t.n)) == 1, ss = t.ss, sla = t.sla, st = t.st,
}
admit(t, new_door, now)
return done({
  k = 'ok', admit = true, state = 'admitted', dk = true, t = T_raw[t.n],
  sx = NOW_WALL + (session_deadline(t) - now), undo = undo,
})
