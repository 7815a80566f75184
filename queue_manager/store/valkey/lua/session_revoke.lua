-- session_revoke (visitor.revoke = advance + Room.revoke_session): the site ends a live session. The
-- session is ticket n's when the caller names it, else the one of the room's sessions holding the door
-- key; it is finished ('revoked') and its slot is free at once. 'none' when no live session of this
-- generation holds that key: nothing changes.
-- ARGV after the header: generation ('' = the room's own), ticket number ('' = look it up), door hash (hex).
local early = begin(false, true)
if early then
  return early
end
local gen = tonumber(ARGV[A + 1] or '')
local n = tonumber(ARGV[A + 2] or '')
local door = ARGV[A + 3]
if gen ~= nil and gen ~= S.gen then
  return done({k = 'none'})
end
if not advance() then
  return done({k = 'again'})
end
local t = nil
if n ~= nil then
  t = getT(n)
else
  local numbers = redis.call('SMEMBERS', K.ss)
  local sorted = {}
  for i, m in ipairs(numbers) do
    sorted[i] = tonumber(m)
  end
  table.sort(sorted)
  for _, m in ipairs(sorted) do
    local s = getT(m)
    if s ~= nil and s.d == door then
      t = s
      break
    end
  end
end
if t == nil or t.s ~= 'admitted' or t.d ~= door then
  return done({k = 'none'})
end
local revoked = t.n
finish(t, 'revoked')
S.srev = (S.srev or 0) + 1
emit('session.revoke', {n = revoked})
return done({k = 'ok', n = revoked})
