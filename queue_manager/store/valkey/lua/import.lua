-- import_room: replace the room's live state with a checkpoint (prepared in Python: records,
-- rebased clocks, derived sets, heaps and Ref indexes). Clears the fence; not an event. A large
-- checkpoint comes in parts: this call clears the room and writes the first, naming the import
-- (``more``); the room stays fenced, by that import, until import_part.lua writes the last.
-- ARGV after the header: room id, payload JSON.
-- A generation this Valkey has seen deleted (delete.lua archived it: meta a<gen % 3> = gen) is never
-- put back: a rebuild that read the journal before the room.delete landed answers 'deleted' instead.
local room_id = ARGV[A + 1]
local p = cjson.decode(ARGV[A + 2])
if redis.call('HGET', K.meta, 'a' .. I(tonumber(p.gen) % #ARCH)) == I(tonumber(p.gen)) then
  return cjson.encode({k = 'deleted', gen = tonumber(p.gen)})
end
for _, name in ipairs(LIVE) do
  redis.call('UNLINK', K[name])
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
import_lists(p)
if p.more ~= nil then  -- a large checkpoint: the rest follows in import_part.lua calls, the room fenced meanwhile
  redis.call('SET', K.fence, 'import:' .. p.more)
  return cjson.encode({k = 'ok', cv = cv})
end
redis.call('UNLINK', K.fence)
redis.call('SPUBLISH', K.lf, 'x')  -- every replica of the line starts over (keys.py, lf)
return cjson.encode({k = 'ok', cv = cv})
