-- Compensation (not in the Python engine, which has no journal): a join, pre-queue join or
-- admission whose journal commit failed is taken back exactly, and the revoke event emitted.
-- ARGV after the header: what (join|prequeue|admit), generation, ticket number, handle, door hash,
-- undo (JSON, for an admission: what the ticket held before it walked in).
if redis.call('EXISTS', K.fence) == 1 then
  return redis.error_reply('QM fenced')
end
if not load_state() then
  return cjson.encode({k = 'ok', ev = {}})
end
local what = ARGV[A + 1]
local gen = tonumber(ARGV[A + 2])
local n = tonumber(ARGV[A + 3])
local h = opt(ARGV[A + 4])
local door = opt(ARGV[A + 5])
if gen ~= S.gen then
  return done({k = 'ok'})
end

-- the ticket leaves wherever it is (line, pass, session or finished record) and is not charged
local function unmint(m)
  local t = getT(m)
  local ref = nil
  if t ~= nil then
    leave_line(t)
    drop_pass_and_session(t)
    ref = t.rf
    delT(m)
  else
    local f = redis.call('HGET', K.fin, I(m))
    if not f then
      return false
    end
    redis.call('HDEL', K.fin, I(m))
    redis.call('ZREM', K.fo, I(m))
    ref = cjson.decode(f).rf
  end
  forget_ref(m, ref)
  return true
end

if what == 'join' then
  if unmint(n) then
    S.joins = S.joins - 1
    redis.call('ZREM', K.jt, 'n' .. I(n))
    emit('join.revoke', {n = n})
  end
elseif what == 'prequeue' then
  if withdraw_pre(h) then
    emit('prequeue.revoke', {h = h})
  else
    local m = tonumber(redis.call('HGET', K.drawn, h) or '')
    if m ~= nil then
      unmint(m)
      redis.call('HDEL', K.drawn, h)
      S.joins = S.joins - 1
      redis.call('ZREM', K.jt, 'h' .. h)
      emit('prequeue.revoke', {h = h})
    end
  end
elseif what == 'admit' then
  local undo = cjson.decode(ARGV[A + 6])
  local t = getT(n)
  if t ~= nil and t.s == 'admitted' and t.d == door then
    if undo.reclaim then
      t.d = undo.d
      t.sla = undo.sla
    else
      redis.call('SREM', K.ss, I(n))
      t.s = 'passed'
      t.d = nil
      t.ss = undo.ss
      t.sla = undo.sla
      t.st = undo.st
      t.ba = undo.ba
      redis.call('SADD', K.ps, I(n))
      hpush(K.hp, t.pa + S.c_pttl * 1000, n)
      if undo.sl then
        t.sl = true
        redis.call('SADD', K.sl, I(n))
        hpush(K.hs, slot_deadline(t), n)
      end
      if undo.bn then
        redis.call('SADD', K.bn, I(n))
      end
    end
    emit('admit.revoke', {n = n, door = door})
  end
end
return done({k = 'ok'})
