-- seen (the presence marks of visitors whose frames an instance answered from its replica of the line):
-- each waiting ticket named is marked seen now, as status_many's mark_polled does; nothing else is read
-- or swept. ARGV after the header: the generation the tickets belong to, then their numbers.
if redis.call('EXISTS', K.fence) == 1 then
  return redis.error_reply('QM fenced')
end
if redis.call('HGET', K.st, 'gen') ~= ARGV[A + 1] then
  return '{"k":"gen"}'
end
local names = {}
for i = A + 2, #ARGV do
  names[#names + 1] = ARGV[i]
end
if #names == 0 then
  return '{"k":"ok","m":0}'
end
local raws = redis.call('HMGET', K.t, unpack(names))
local put = {}
for i, raw in ipairs(raws) do
  if raw then
    local t = cjson.decode(raw)
    if t.s == 'waiting' and t.sn < NOW then
      t.sn = NOW
      put[#put + 1] = names[i]
      put[#put + 1] = cjson.encode(t)
    end
  end
end
if #put > 0 then
  redis.call('HSET', K.t, unpack(put))
end
return '{"k":"ok","m":' .. (#put / 2) .. '}'
