-- join_many (visitor.join for each ask in turn, at one instant): the joins of one room that waited in
-- this instance behind its last join call go in one call, so the room is loaded, drawn and swept once
-- for all of them; each is joined exactly as join.lua joins one (prelude join_visitor), in the order
-- they arrived. ARGV after the header: the asks, 10 each (join.lua's arguments). The reply: each ask's
-- view or refusal (js), in order, and every event of the call.
local early = begin(false, true)
if early then
  return early
end
-- the Refs of every number the asks could mint must be in the window the store sent
local count = (#ARGV - A) / 10
local first = S.next
if DRAW_NOW then
  first = first + #DRAW.order
end
if not is_shard() and (ref_for(first) == nil or ref_for(first + count - 1) == nil) then  -- a shard mints none
  return cjson.encode({k = 'refs', gen = S.gen, next = first})
end
if not advance() then
  return done({k = 'again'})
end
local out = {}
for i = A + 1, #ARGV, 10 do
  out[#out + 1] = join_visitor(i)
end
return done({k = 'ok', js = out})
