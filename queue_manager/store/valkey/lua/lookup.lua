-- lookup (Engine.lookup, and report.lookup for eject): by ticket number or Ref, falling back to the
-- archived generations. ARGV after the header: kind (num|long|ref), number, Ref (upper case),
-- archives (1: fall back to the archives, as Engine.lookup does; 0: report.lookup only).
local kind = ARGV[A + 1]
local number = tonumber(ARGV[A + 2])
local ref = ARGV[A + 3]
local archives = ARGV[A + 4] == '1'
if redis.call('EXISTS', K.fence) == 1 then
  return redis.error_reply('QM fenced')
end
local exists = load_state()
if exists and parts_pending() then  -- a large draw or purge being applied: its next part first (as begin)
  return parts_reply()
end
if exists then
  if draw_due() then
    if not draw_ready() then
      return draw_reply()
    end
    DRAW_NOW = true
  end
  if not advance() then
    return done({k = 'again'})
  end
  if kind == 'long' then
    return err('no_ticket_long')
  end
  if kind == 'num' then
    local d = describe(number)
    if d == nil then
      return err('no_ticket_num')
    end
    return done({k = 'ok', d = d})
  end
  local cur = redis.call('HGET', K.refs, ref)
  if cur then
    local numbers = split_numbers(cur)
    if #numbers > 1 then
      local candidates = {}
      for i, n in ipairs(numbers) do
        candidates[i] = describe(n)
      end
      return done({k = 'candidates', c = candidates})
    end
    return done({k = 'ok', d = describe(numbers[1])})
  end
  if not archives then
    return err('no_ticket_ref')
  end
elseif not archives then
  return redis.error_reply('QM no_room')
end
local kept = {}
for i, key in ipairs(ARCH) do
  local g = tonumber(redis.call('HGET', K.meta, 'a' .. I(i - 1)) or '')
  if g ~= nil then
    kept[#kept + 1] = {g, key}
  end
end
table.sort(kept, function(a, b) return a[1] > b[1] end)
for _, item in ipairs(kept) do
  local numbers = redis.call('HGET', item[2], ref)
  if numbers then
    local reply = {k = 'previous', pgen = item[1], tickets = split_numbers(numbers)}
    if exists then
      return done(reply)
    end
    return cjson.encode(reply)
  end
end
if not exists then
  return redis.error_reply('QM no_room')
end
return err('no_ticket_engine')
