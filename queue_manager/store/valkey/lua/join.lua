-- join (visitor.join): re-presenting a held place returns it; anything else mints a ticket (or, before
-- opensAt, a pre-queue entry). ARGV after the header: ident, fp, fp2, cookie, presented gen, n,
-- handle, return url, a fresh pre-queue handle, the lane a grant names ('' none: the default lane).
local early = begin(false, true)
if early then
  return early
end
-- the lane a new place joins (lanes.lane_for): checked before anything changes
local lane = opt(ARGV[A + 10])
if lane ~= nil and lanes().idx[lane] == nil then
  return err('unknown_lane', {lane = lane})
end
if lane == nil and has_lanes() then
  lane = lanes().list[1].id
end
-- the Ref of the number this join could mint must be in the window the store sent
local need = S.next
if DRAW_NOW then
  need = need + #DRAW.order
end
if ref_for(need) == nil then
  return cjson.encode({k = 'refs', gen = S.gen, next = need})
end
if not advance() then
  return done({k = 'again'})
end
local C = client_at(A + 1)
local P = presented_at(A + 5)
local ret = opt(ARGV[A + 8])
local handle = ARGV[A + 9]

local found = resolve(P, C)
if found.ticket ~= nil then
  local t = found.ticket
  t.sn = NOW
  if ret ~= nil and ret ~= t.ru then
    t.ru = ret
    emit('return.update', {n = t.n, ret = ret})
  end
  if t.s == 'admitted' and C.ck ~= nil and t.ck == C.ck then
    reclaim(t)
  end
  return done(view_payload(found))
end
if found.pre ~= nil then
  local e = found.pre
  e.sn = NOW
  if ret ~= nil and ret ~= e.ru then
    e.ru = ret
    emit('return.update', {h = e.h, ret = ret})
  end
  save_pre(e)
  return done(view_payload(found))
end
local state = effective_state(NOW_WALL)
if state == 'bypass' then
  count_arrival()
  return done(view_payload({reason = found.reason}))
end
if S.c_qm == 'reject' then  -- closed: nobody joins (visitor.room_closed)
  return err('room_closed')
end
if state == 'scheduled' then
  local limit = S.c_pqmax
  if limit ~= nil and tonumber(redis.call('HGET', K.ppi, C.id) or '0') >= limit then
    return err('queue_identity_limit')
  end
  local e = {h = handle, id = C.id, fp = C.fp, f2 = C.f2, ck = C.ck, j = NOW_WALL, sn = NOW, ru = ret, ln = lane}
  save_pre(e)
  S.pqseq = (S.pqseq or 0) + 1
  redis.call('ZADD', K.pqo, I(S.pqseq), handle)
  redis.call('HINCRBY', K.ppi, C.id, 1)
  S.pqver = (S.pqver or 0) + 1
  S.joins = S.joins + 1
  redis.call('ZADD', K.jt, I(NOW), 'h' .. handle)
  emit('prequeue.join', {
    h = handle, ident = C.id, fp = C.fp, fp2 = jnull(C.f2), ck = jnull(C.ck), joined = NOW_WALL, ret = jnull(ret),
    ln = lane,
  })
  return done(view_payload({pre = e, reason = found.reason, new = true}))
end
local limit = S.c_qmax
if limit ~= nil and tonumber(redis.call('HGET', K.pi, C.id) or '0') >= limit then
  return err('queue_identity_limit')
end
-- a full line (visitor.line_full): maxWaiting people, or the estimated wait of the place this join
-- would take past maxWaitSec. Nobody in line is touched; the refusal is counted.
local waiting = line_len()
local passthrough = S.c_qm == 'passthrough'
local full = not passthrough and S.c_wmax ~= nil and waiting >= S.c_wmax
if not full and not passthrough and S.c_wsec ~= nil and state == 'active' and S.c_rate > 0 then
  full = math.max(1, math.ceil((waiting + 1) * 60 / S.c_rate)) > S.c_wsec
end
if full then
  S.refused = (S.refused or 0) + 1
  return err('queue_full')
end
local t = mint(C.id, C.fp, C.f2, C.ck, NOW_WALL, ret, true, true, ref_for(S.next), lane)
t.r = found.reason
emit('join', {
  n = t.n, reason = jnull(found.reason), ident = C.id, fp = C.fp, fp2 = jnull(C.f2), ck = jnull(C.ck),
  joined = NOW_WALL, ret = jnull(ret), ln = lane,
})
if passthrough and state == 'active' then  -- no line: the pass at once, counted like any other
  promote(t, false, NOW)
end
return done(view_payload({ticket = t, n = t.n, reason = found.reason, new = true}))
