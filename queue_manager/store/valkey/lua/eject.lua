-- eject (MemoryStore.eject = report.lookup + operator.eject + report.describe): revoke the pass, drop any
-- session and send the visitor to the back; a finished ticket is forgotten.
-- ARGV after the header: kind (num|long|ref), number, Ref (upper case).
local early = begin(false, true)
if early then
  return early
end
if not advance() then
  return done({k = 'again'})
end
local kind = ARGV[A + 1]
local ref = ARGV[A + 3]
local n
if kind == 'long' then
  return err('no_ticket_long')
elseif kind == 'num' then
  n = tonumber(ARGV[A + 2])
  if describe(n) == nil then
    return err('no_ticket_num')
  end
else
  local cur = redis.call('HGET', K.refs, ref)
  if not cur then
    return err('no_ticket_ref')
  end
  local numbers = split_numbers(cur)
  if #numbers > 1 then
    local candidates = {}
    for i, m in ipairs(numbers) do
      candidates[i] = describe(m)
    end
    return err('ambiguous_ref', {c = candidates})
  end
  n = numbers[1]
end

local t = getT(n)
if t == nil then
  local f = redis.call('HGET', K.fin, I(n))
  if f then
    redis.call('HDEL', K.fin, I(n))
    redis.call('ZREM', K.fo, I(n))
    forget_ref(n, cjson.decode(f).rf)
    emit('eject', {n = n, forgotten = true})
  end
  return done({k = 'ok', n = n})
end
leave_line(t)
drop_pass_and_session(t)
t.s = 'waiting'
t.r = 'ejected'
line_push(n)  -- back of the line; the place is not charged to the address again
S.ejected = S.ejected + 1
emit('eject', {n = n})
return done({k = 'ok', n = n, d = describe(n)})
