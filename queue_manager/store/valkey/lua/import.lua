-- import_room: replace the room's live state with a checkpoint (prepared in Python: records,
-- rebased clocks, derived sets, heaps and Ref indexes). Clears the fence; not an event.
-- ARGV after the header: room id, payload JSON.
-- A generation this Valkey has seen deleted (delete.lua archived it: meta a<gen % 3> = gen) is never
-- put back: a rebuild that read the journal before the room.delete landed answers 'deleted' instead.
local room_id = ARGV[A + 1]
local p = cjson.decode(ARGV[A + 2])
if redis.call('HGET', K.meta, 'a' .. I(tonumber(p.gen) % #ARCH)) == I(tonumber(p.gen)) then
  return cjson.encode({k = 'deleted', gen = tonumber(p.gen)})
end
for _, name in ipairs(LIVE) do
  redis.call('DEL', K[name])
end
local gen = tonumber(p.gen)
local meta_gen = tonumber(redis.call('HGET', K.meta, 'gen') or '0')
if gen > meta_gen then
  redis.call('HSET', K.meta, 'gen', I(gen))
end
local cv = redis.call('HINCRBY', K.meta, 'cv', 1)
chunked('HSET', K.st, p.st, 400)
redis.call('HSET', K.st, 'cv', I(cv), 'gen', I(gen))
redis.call('SET', K.cfg, p.cfg)
local HASHES = {'t', 'pi', 'fin', 'refs', 'aref', 'pq', 'ppi', 'drawn', 'draw'}
for _, name in ipairs(HASHES) do
  if p[name] ~= nil and #p[name] > 0 then
    chunked('HSET', K[name], p[name], 400)
  end
end
local ZSETS = {'line', 'hp', 'hs', 'he', 'fo', 'pqo', 'ph', 'll'}
for _, name in ipairs(ZSETS) do
  if p[name] ~= nil and #p[name] > 0 then
    chunked('ZADD', K[name], p[name], 400)
  end
end
local SETS = {'ps', 'ss', 'sl', 'bn'}
for _, name in ipairs(SETS) do
  if p[name] ~= nil and #p[name] > 0 then
    chunked('SADD', K[name], p[name], 400)
  end
end
redis.call('DEL', K.fence)
redis.call('SPUBLISH', K.lf, 'x')  -- every replica of the line starts over (keys.py, lf)
return cjson.encode({k = 'ok', cv = cv})
