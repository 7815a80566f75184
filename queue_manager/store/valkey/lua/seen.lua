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
-- the record's "sn" is rewritten in place (no decode and encode of the whole record: the cost of a mark
-- is what keeps this call cheap); a record that is not a waiting ticket's is left alone. A waiting
-- ticket's record has no "s" (the default, prelude.lua "Records"), or "s":"waiting" when written so by an
-- older server. '"s":' matches the key s only: inside a JSON string every quote is escaped.
local now = I(NOW)
local put = {}
local raws = redis.call('HMGET', K.t, unpack(names))
for i, raw in ipairs(raws) do
  if raw and (not string.find(raw, '"s":', 1, true) or string.find(raw, '"s":"waiting"', 1, true)) then
    local sn = tonumber(string.match(raw, '"sn":(%-?[%d%.eE%+]+)'))
    if sn ~= nil and sn < NOW then
      put[#put + 1] = names[i]
      put[#put + 1] = string.gsub(raw, '"sn":%-?[%d%.eE%+]+', '"sn":' .. now, 1)
    end
  end
end
if #put > 0 then
  redis.call('HSET', K.t, unpack(put))
end
return '{"k":"ok","m":' .. (#put / 2) .. '}'
