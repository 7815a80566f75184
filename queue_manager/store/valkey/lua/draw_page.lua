-- draw_page: entries [from, from + count) of the pre-queue in join order, [handle, ident] each, for the
-- draw a store claimed (draw_reply in the prelude); ``ver`` tells the store whether the pre-queue is
-- still the one it began reading. A pure read: no advance, no event.
-- ARGV after the header: from (0-based), count.
local refused = open_room()
if refused then
  return refused
end
return cjson.encode({k = 'page', ver = draw_version(), entries = draw_entries(tonumber(ARGV[A + 1]), tonumber(ARGV[A + 2]))})
