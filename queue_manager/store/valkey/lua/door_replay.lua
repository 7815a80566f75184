-- door_replay (visitor.door_replay): the hot path — a live session's own door key slides it; 'none'
-- when it is not that case (nothing counted; the store then runs the full check). One round trip.
-- ARGV after the header: presented gen, n, door hash, url sent (1/0), matched rule index ('' none),
-- unprotected (1/0).
local early = begin(true, true)
if early then
  return early
end
local gen = tonumber(ARGV[A + 1])
local n = tonumber(ARGV[A + 2])
local door = ARGV[A + 3]
if gen ~= S.gen or n == nil then
  return cjson.encode({k = 'none'})
end
local t = getT(n)
if t == nil or t.s ~= 'admitted' or t.d ~= door then
  return cjson.encode({k = 'none'})
end
if not advance() then
  return done({k = 'again'})
end
t = getT(n)
if t == nil or t.s ~= 'admitted' then  -- the sweep just ended it
  return done({k = 'none'})
end
if effective_state(NOW_WALL) == 'bypass' then  -- no arrival: the door key shows a visitor already inside
  return done({k = 'ok', admit = true, state = 'bypass'})
end
local url_sent = ARGV[A + 4] == '1'
local rule = opt(ARGV[A + 5])
if not url_sent then
  S.unscoped = S.unscoped + 1
elseif rule ~= nil then
  count_rule(rule)
end
if url_sent and ARGV[A + 6] == '1' then
  return done({k = 'ok', admit = true, state = 'unprotected'})
end
slide(t, NOW, true)
return done({k = 'ok', admit = true, state = 'admitted', t = T_raw[n], sx = NOW_WALL + (session_deadline(t) - NOW)})
