-- status (Room.status): a poll marks the holder seen, and told when a pass is shown.
-- ARGV after the header: ident, fp, fp2, cookie, presented gen, n, handle.
local early = begin(false, true)
if early then
  return early
end
if not advance() then
  return done({k = 'again'})
end
local C = client_at(A + 1)
local P = presented_at(A + 5)
local found = resolve(P, C)
if found.ticket ~= nil then
  local t = found.ticket
  t.sn = NOW
  if t.s == 'passed' then
    t.tl = true
  end
elseif found.pre ~= nil then
  found.pre.sn = NOW
  save_pre(found.pre)
end
return done(view_payload(found))
