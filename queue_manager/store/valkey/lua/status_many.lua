-- status_many (visitor.status for each ask in turn, at one instant): the room is loaded, drawn and swept
-- once, then every ask is resolved and marked (mark_polled) exactly as status.lua does it.
-- ARGV after the header: the asks, 7 each: ident, fp, fp2, cookie, presented gen, n, handle.
-- A waiting ticket's view in a room without lanes carries its line sequence (ls), and the reply the
-- room's line feed sequence (lf, from done()): what a replica of the line answers from (replica.py).
local early = begin(false, true)
if early then
  return early
end
if not advance() then
  return done({k = 'again'})
end
local views = {}
for i = A + 1, #ARGV, 7 do
  local found = resolve(presented_at(i + 4), client_at(i))
  local view = {moved = true}  -- a pre-queue shard that does not hold it: the room answers
  if not found.moved then
    mark_polled(found)
    view = view_payload(found)
    view.k = nil
  end
  local t = view.t
  if view.pos ~= nil and view.la == nil then
    view.ls = tonumber(redis.call('ZSCORE', K.line, I(t.n)))
  end
  if t ~= nil then  -- only what a view renders (codec.visitor_view): the reply stays small
    view.t = {n = t.n, s = t.s, r = t.r, j = t.j, ru = t.ru, pa = t.pa, ln = t.ln}
  end
  views[#views + 1] = view
end
return done({k = 'ok', vs = views})
