-- draw_stage: one part of a large draw put in place by the caller that claimed it (draw_reply in the
-- prelude), before the call that applies it (draw_ready, with the count put): the order's handles to
-- K.dq, their Refs to K.dr, a piece of the record to K.drs. So the call that applies the draw carries
-- none of it, and Valkey never spends one long call on a large drop. Answered 'restage' (nothing put)
-- unless the claim is still this caller's, the pre-queue is the one it read (the version) and the part
-- follows the last one put; a first part clears what an earlier claimer left. No advance, no event.
-- ARGV after the header: version, claim, offset, record piece, count, then count handles, count Refs.
local refused = open_room()
if refused then
  return refused
end
local ver, claim, offset = ARGV[A + 1], ARGV[A + 2], tonumber(ARGV[A + 3])
local piece, count = ARGV[A + 4], tonumber(ARGV[A + 5])
if S.dro ~= nil or S.dcl == nil or 'c' .. I(S.dcl) ~= claim or draw_version() ~= ver then
  return cjson.encode({k = 'restage'})
end
if offset == 0 then
  redis.call('UNLINK', K.dq, K.dr, K.drs)
end
if redis.call('LLEN', K.dq) ~= offset then
  return cjson.encode({k = 'restage'})
end
local at = A + 5
for _, key in ipairs({K.dq, K.dr}) do
  for i = 1, count, 512 do
    local part = {}
    for j = i, math.min(i + 511, count) do
      part[#part + 1] = ARGV[at + j]
    end
    redis.call('RPUSH', key, unpack(part))
  end
  at = at + count
end
redis.call('APPEND', K.drs, piece)
return cjson.encode({k = 'staged', n = offset + count})
