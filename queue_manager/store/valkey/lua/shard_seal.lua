-- shard_seal (a pre-queue shard, shards.py): ARGV after the header: '1' seals the shard (from now on its
-- sign-ups, polls and door checks are its room's: it answers 'moved'), '0' opens it again, '=' leaves it as
-- it is; then, optionally, the room's drop's commitment ('' none), which the shard's visitors are shown as
-- the room's would be (the seed stays with the room: a shard never draws). Answers how many entries it holds.
-- A flag and a copy: no advance, no event.
local refused = open_shard()
if refused then
  return refused
end
if ARGV[A + 1] == '1' then
  S.sld = '1'
elseif ARGV[A + 1] == '0' then
  S.sld = nil
end
local com = ARGV[A + 2]
if com ~= nil then
  redis.call('UNLINK', K.draw)
  if com ~= '' then
    redis.call('HSET', K.draw, 'com', com)
  end
end
return done({k = 'ok', count = redis.call('HLEN', K.pq)})
