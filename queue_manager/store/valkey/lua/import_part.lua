-- import_part: the next part of a large checkpoint import.lua began (snapshot.py import_parts): its
-- records, lines, sets and indexes added; the last part lifts the import's fence and restarts every
-- replica of the line. Answered 'gone' (nothing written) unless the room is still fenced by this import
-- and of its generation: another rebuild began meanwhile (its first part cleared the room), or the room
-- was deleted. Not an event.
-- ARGV after the header: the import's name, payload JSON (gen, last, and lists as import.lua's).
local token = ARGV[A + 1]
local p = cjson.decode(ARGV[A + 2])
if redis.call('GET', K.fence) ~= 'import:' .. token or redis.call('HGET', K.st, 'gen') ~= I(tonumber(p.gen)) then
  return cjson.encode({k = 'gone'})
end
import_lists(p)
if p.last then
  redis.call('UNLINK', K.fence)
  redis.call('SPUBLISH', K.lf, 'x')  -- every replica of the line starts over (keys.py, lf)
end
return cjson.encode({k = 'ok'})
