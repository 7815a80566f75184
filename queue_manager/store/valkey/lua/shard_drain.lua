-- shard_drain (a pre-queue shard, shards.py): the entries its room now holds (prequeue_merge.lua, committed)
-- leave the shard, as a taken-back sign-up leaves a pre-queue, journaled as one prequeue.drain. ARGV after
-- the header: reopen ('1': the shard takes sign-ups again after this call), then the handles.
local refused = open_shard()
if refused then
  return refused
end
local gone = {}
for i = A + 2, #ARGV do
  if withdraw_pre(ARGV[i]) then
    gone[#gone + 1] = ARGV[i]
  end
end
if #gone > 0 then
  emit('prequeue.drain', {h = gone})
end
if ARGV[A + 1] == '1' then
  S.sld = nil
end
return done({k = 'ok', count = #gone})
