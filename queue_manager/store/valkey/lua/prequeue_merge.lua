-- prequeue_merge (a room whose drop takes sign-ups in shards, shards.py): ARGV after the header: mode.
--   'add', then the shard's stored entry records (JSON text, shard_page.lua): each entry this room does not
--      hold yet joins its pre-queue as it was signed up (its handle, address, times, return URL and lane;
--      a lane the room no longer has: its first lane), journaled as one prequeue.merge. Answers 'late' and
--      adds nothing when the drop has been drawn (no committed seed waits).
--   'done': every shard has been merged for this drop (its seed kept in S.shd): the room's draw is due on
--      its own pre-queue again (draw_due).
-- No advance and no draw: the store calls it while the room's draw waits for the shards.
local refused = open_room()
if refused then
  return refused
end
local seed = committed_seed()
if ARGV[A + 1] == 'done' then
  S.shd = seed
  return done({k = 'ok'})
end
if seed == nil or S.dro ~= nil then
  return done({k = 'late', count = #ARGV - A - 1})
end
local L = lanes()
local fallback = nil
if #L.list > 0 then
  fallback = L.list[1].id
end
local added = {}
for i = A + 2, #ARGV do
  local e = cjson.decode(ARGV[i])
  if redis.call('HEXISTS', K.pq, e.h) == 0 and redis.call('HEXISTS', K.drawn, e.h) == 0 then
    if e.ln == nil or L.idx[e.ln] == nil then
      e.ln = fallback
    end
    save_pre(e)
    S.pqseq = (S.pqseq or 0) + 1
    redis.call('ZADD', K.pqo, I(S.pqseq), e.h)
    redis.call('HINCRBY', K.ppi, e.id, 1)
    S.joins = S.joins + 1
    added[#added + 1] = {
      h = e.h, ident = e.id, fp = e.fp, fp2 = jnull(e.f2), ck = jnull(e.ck), joined = e.j, ret = jnull(e.ru),
      ln = e.ln,
    }
  end
end
if #added > 0 then
  S.pqver = (S.pqver or 0) + 1
  emit('prequeue.merge', {entries = added})
end
return done({k = 'ok', count = #added})
