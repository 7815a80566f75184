-- join (visitor.join): one visitor (prelude join_visitor). ARGV after the header: ident, fp, fp2, cookie,
-- presented gen, n, handle, return url, a fresh pre-queue handle, the lane a grant names ('' none).
local early = begin(false, true)
if early then
  return early
end
-- an unknown lane is refused before anything changes
local lane = opt(ARGV[A + 10])
if lane ~= nil and lanes().idx[lane] == nil then
  return err('unknown_lane', {lane = lane})
end
-- the Ref of the number this join could mint must be in the window the store sent
local need = S.next
if DRAW_NOW then
  need = need + #DRAW.order
end
if not is_shard() and ref_for(need) == nil then  -- a shard mints no number
  return cjson.encode({k = 'refs', gen = S.gen, next = need})
end
if not advance() then
  return done({k = 'again'})
end
return done(join_visitor(A + 1))
