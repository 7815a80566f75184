-- line_merge (a FIFO room whose joins are taken in shards, line_merge.py): the shards' joins of one take, in
-- the order of their stamps, each joined as join.lua joins a visitor (the same refusals: a closed room, the
-- address's places, a full line) and journaled as a join at its stamp. Each handle's outcome is kept ten
-- seconds (as long as its request waits for it) in K.mgd: the join's view as join.lua answers it (its ticket,
-- its place), or '-<code>'; a handle already there is not joined twice. So the waiting request answers
-- without another call to the room.
-- ARGV after the header: the entries' stored records (JSON text), in order.
local early = begin(false, true)
if early then
  return early
end
local count = #ARGV - A
if count > 0 and (ref_for(S.next) == nil or ref_for(S.next + count - 1) == nil) then
  return cjson.encode({k = 'refs', gen = S.gen, next = S.next})
end
if not advance() then
  return done({k = 'again'})
end
local L = lanes()
local fallback = nil
if #L.list > 0 then
  fallback = L.list[1].id
end
local state = effective_state(NOW_WALL)
local joined = 0
for i = A + 1, #ARGV do
  local e = cjson.decode(ARGV[i])
  if redis.call('HEXISTS', K.mgd, e.h) == 0 then
    local code = nil
    local waiting = line_len()
    if S.c_qm == 'reject' then
      code = 'room_closed'
    elseif S.c_qmax ~= nil and tonumber(redis.call('HGET', K.pi, e.id) or '0') >= S.c_qmax then
      code = 'queue_identity_limit'
    elseif S.c_wmax ~= nil and waiting >= S.c_wmax then
      code = 'queue_full'
    elseif S.c_wsec ~= nil and state == 'active' and S.c_rate > 0 and math.max(1, math.ceil((waiting + 1) * 60 / S.c_rate)) > S.c_wsec then
      code = 'queue_full'
    end
    if code ~= nil then
      if code == 'queue_full' then
        S.refused = (S.refused or 0) + 1
      end
      redis.call('HSET', K.mgd, e.h, '-' .. code)
    else
      if e.ln == nil or L.idx[e.ln] == nil then
        e.ln = fallback
      end
      local t = mint(e.id, e.fp, e.f2, e.ck, e.j, e.ru, true, true, ref_for(S.next), e.ln)
      emit('join', {
        n = t.n, reason = NULL, ident = e.id, fp = e.fp, fp2 = jnull(e.f2), ck = jnull(e.ck), joined = e.j,
        ret = jnull(e.ru), ln = e.ln,
      })
      redis.call('HSET', K.mgd, e.h, cjson.encode(view_payload({ticket = t, n = t.n, new = true})))
      joined = joined + 1
    end
    redis.call('ZADD', K.mgt, I(NOW_WALL), e.h)
  end
end
-- the outcomes of ten seconds ago are forgotten: their requests had them, or stopped waiting
local old = redis.call('ZRANGEBYSCORE', K.mgt, '-inf', NOW_WALL - 10000, 'LIMIT', 0, 1000)
if #old > 0 then
  redis.call('HDEL', K.mgd, unpack(old))
  redis.call('ZREM', K.mgt, unpack(old))
end
return done({k = 'ok', count = joined})
