-- status (visitor.status): a poll marks the holder seen, and told when a pass is shown.
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
if found.moved then  -- a pre-queue shard that does not hold it: the room answers
  return done({k = 'moved'})
end
mark_polled(found)
return done(view_payload(found))
