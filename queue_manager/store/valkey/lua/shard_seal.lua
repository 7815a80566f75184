-- shard_seal (a pre-queue shard, shards.py): ARGV after the header: '1' seals the shard (from now on its
-- sign-ups, polls and door checks are its room's: it answers 'moved'), '0' opens it again. Answers how
-- many entries it holds. A pure flag: no advance, no event.
local refused = open_shard()
if refused then
  return refused
end
if ARGV[A + 1] == '1' then
  S.sld = '1'
else
  S.sld = nil
end
return done({k = 'ok', count = redis.call('HLEN', K.pq)})
