-- line_snap: what a replica of the line starts from (replica.py), read at one instant: the generation,
-- the line feed sequence (lf), the config version and the waiting line's sequences, comma-joined in order.
if redis.call('EXISTS', K.fence) == 1 then
  return redis.error_reply('QM fenced')
end
local st = redis.call('HMGET', K.st, 'gen', 'lfs', 'cv')
if not st[1] then
  return cjson.encode({k = 'none'})
end
local pairs_ = redis.call('ZRANGE', K.line, 0, -1, 'WITHSCORES')
local seqs = {}
for i = 2, #pairs_, 2 do
  seqs[#seqs + 1] = pairs_[i]
end
return cjson.encode({k = 'ok', gen = tonumber(st[1]), lf = tonumber(st[2] or '0') or 0, cv = tonumber(st[3]),
  ls = table.concat(seqs, ',')})
