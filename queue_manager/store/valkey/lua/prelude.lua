-- The shared prelude of every script: the rules of queue_manager/engine (room.py and the operations
-- beside it: visitor.py, operator.py, outflow.py, drop.py, deadlines.py, minute.py), ported function
-- by function (each carries the name of its Python original). The Python engine is the reference;
-- where this file and the Python engine differ, the Python engine is right.
--
-- Time is integer milliseconds and never read from the server: every script receives the store
-- clock's wall and monotonic readings. Credit is in integer units (SLOT per slot).
--
-- ARGV header (the same for every script; the operation's own arguments follow at A + 1):
--   1 now_wall  2 now_mono  3 expected config version ('*' = any)  4 FINISHED_KEEP
--   5 ARCHIVE_TICKETS  6 sweep budget  7 draw version  8 the draw (JSON: order, handles, groups;
--      seed and com when no seed was committed)  9 draw Refs (JSON)
--   10 the Ref window's "generation:first number"  11 Ref window (the Refs of the next numbers,
--      concatenated: each REF_WIDTH characters, no separator; one is cut out, nothing decoded)
--   12 the tick's promotion budget  13 admission maintenance ('1': every room holds its line)
--   14 the writer: the instance that will commit this call's events (kept with them in the outbox)
--   15 '1': ticket records are stored with every field (TICKET_RECORDS=full), as a release from before
--      the short form reads them
--
-- Records (JSON, absent field = None / False / 0 as in the Python dataclasses):
--   ticket   {id (ident), fp, f2, ck (hex), j (joined wall), sn (seen mono), ru (return url),
--             ch (charged), s (waiting|passed|admitted), r (reason), pm (passed wall), wm (waited ms),
--             pa (pass_at mono), sl (slot), tl (told), ba (bounced_at mono), d (door hash hex),
--             ss, sla, st (session start / last / touched, mono), rf (its Ref), ln (lane)}
--            stored without its defaults (T_DEFAULT): s absent = 'waiting'; pa, ss, sla, st absent = 0;
--            and without n (the t hash's field is the number). A record stored with them (by an older
--            server) reads the same, and loses them when a script next writes it whole. In memory (getT,
--            newT) a record has its n and reads its defaults; done() stores it without them (stored()).
--            seen.lua and Python (codec.ticket_record, snapshot.py) read the stored form.
--   finished {j, pm, wm, r, e (ended wall), rf}
--   pre      {h, id, fp, f2, ck, j, sn, ru}
--
-- A script changes the room's scalars (S) and tickets (T) in memory and writes them back once at
-- the end (done()); sets, heaps and the line are changed in place.

local SLOT = 60000
local TOUCH_EVERY_MS = 60000
local BOUNCED_GRACE_SEC = 30
local CLAIM_WINDOW_SEC = 120
local WAITS_KEPT = 4096  -- view.WAITS_KEPT: the waits K.wt keeps, of the room's latest passes

local NOW_WALL = tonumber(ARGV[1])
local NOW = tonumber(ARGV[2])
local WANT_CV = ARGV[3]
local FINISHED_KEEP = tonumber(ARGV[4])
local ARCHIVE_KEEP = tonumber(ARGV[5])
local SWEEP_MAX = tonumber(ARGV[6])
local DRAW_VER = ARGV[7]
local DRAW_ORDER = ARGV[8]
local DRAW_REFS = ARGV[9]
local REFS_GEN, REFS_BASE = string.match(ARGV[10], '^(%d+):(%d+)$')
REFS_GEN, REFS_BASE = tonumber(REFS_GEN), tonumber(REFS_BASE)
local REFS_WINDOW = ARGV[11]
local PROMOTE_MAX = tonumber(ARGV[12])
local HOLD = ARGV[13] == '1'
local WRITER = ARGV[14]
local FULL_RECORDS = ARGV[15] == '1'
local DRAW_CHUNK = tonumber(ARGV[16])
local A = 16

local NULL = cjson.null

-- ------------------------------------------------------------------ small helpers

local function I(x)
  return string.format('%d', x)
end

local function opt(v)
  if v == nil or v == false or v == '' then
    return nil
  end
  return v
end

local function jnull(v)
  if v == nil then
    return NULL
  end
  return v
end

local function split_numbers(s)
  local out = {}
  for part in string.gmatch(s, '[^,]+') do
    out[#out + 1] = tonumber(part)
  end
  return out
end

-- HSET/ZADD/SADD with many arguments, in chunks (Lua's unpack has a stack limit)
local function chunked(cmd, key, arr, step)
  for i = 1, #arr, step do
    local args = {}
    for j = i, math.min(i + step - 1, #arr) do
      args[#args + 1] = arr[j]
    end
    redis.call(cmd, key, unpack(args))
  end
end

-- ------------------------------------------------------------------ the room's scalars

local NUMERIC = {
  gen = true, cv = true, next = true, credit = true, last = true, created = true, seq = true,
  lseq = true, joins = true, passes = true, wsum = true, unscoped = true, blocked = true, refused = true, ejected = true, srev = true,
  pqver = true, pqseq = true, dro = true, drn = true, dcl = true, rgo = true, rgq = true, fseq = true, lfs = true, pseq = true, phseq = true,
  c_rate = true, c_maxc = true, c_pttl = true, c_sttl = true, c_smax = true, c_pres = true,
  c_qmax = true, c_pqmax = true, c_wmax = true, c_wsec = true, c_opens = true, c_rules = true, c_pqsh = true,
}
local S_raw = {}
local S_dirty = {}
local S = setmetatable({}, {
  __index = S_raw,
  __newindex = function(_, k, v)
    S_raw[k] = v
    S_dirty[k] = true
  end,
})

local function load_state()
  local raw = redis.call('HGETALL', K.st)
  if #raw == 0 then
    return false
  end
  for i = 1, #raw, 2 do
    local k, v = raw[i], raw[i + 1]
    if v == '' then
      S_raw[k] = nil
    elseif NUMERIC[k] then
      S_raw[k] = tonumber(v)
    else
      S_raw[k] = v
    end
  end
  return true
end

-- The room's state loaded, or the refusal a room being rebuilt (fenced) or gone gets (an error reply).
local function open_room()
  if redis.call('EXISTS', K.fence) == 1 then
    return redis.error_reply('QM fenced')
  end
  if not load_state() then
    return redis.error_reply('QM no_room')
  end
  return nil
end

-- ------------------------------------------------------------------ tickets (written back at the end)

local T_raw = {}
local T_prox = {}
local T_dirty = {}

-- the fields a ticket record leaves out when they hold their default (see "Records" above)
local T_DEFAULT = {s = 'waiting', pa = 0, ss = 0, sla = 0, st = 0}
local T_META = {__index = T_DEFAULT}

-- a record as read (cjson.decode of the stored JSON) or as minted: its number set, its absent defaults read
-- through T_META. cjson encodes a table's own fields only: a reply carrying a record (T_raw) has its n but
-- not the defaults it leaves out, which Python fills in (codec.ticket_record).
local function record(n, raw)
  raw.n = n
  return setmetatable(raw, T_META)
end

-- the JSON stored for a record: without n and without the fields that hold their default; with
-- TICKET_RECORDS=full, every field (n and the defaults too), the form a release from before reads
local function stored(raw)
  local out = {}
  for k, v in pairs(raw) do
    if FULL_RECORDS or (k ~= 'n' and T_DEFAULT[k] ~= v) then
      out[k] = v
    end
  end
  if FULL_RECORDS then
    for k, v in pairs(T_DEFAULT) do
      if out[k] == nil then
        out[k] = v
      end
    end
  end
  return cjson.encode(out)
end

local function wrap(n, raw)
  local p = setmetatable({}, {
    __index = raw,
    __newindex = function(_, k, v)
      raw[k] = v
      T_dirty[n] = true
    end,
  })
  T_prox[n] = p
  return p
end

local function getT(n)
  local p = T_prox[n]
  if p ~= nil then
    return p or nil
  end
  local s = redis.call('HGET', K.t, I(n))
  if not s then
    T_prox[n] = false
    return nil
  end
  local raw = record(n, cjson.decode(s))
  T_raw[n] = raw
  return wrap(n, raw)
end

local function newT(raw)
  record(raw.n, raw)
  T_raw[raw.n] = raw
  T_dirty[raw.n] = true
  return wrap(raw.n, raw)
end

local function delT(n)
  T_raw[n] = nil
  T_prox[n] = false
  T_dirty[n] = true
end

local function save_pre(e)
  redis.call('HSET', K.pq, e.h, cjson.encode(e))
end

-- ------------------------------------------------------------------ events

local EV = {}

local function emit(typ, data)
  S.seq = (S.seq or 0) + 1
  EV[#EV + 1] = {typ, S.seq, NOW_WALL, data or {}}
end

-- ------------------------------------------------------------------ config-derived rules

-- a pre-queue shard (store/valkey/shards.py): a hidden room that only holds a drop's sign-ups
local function is_shard()
  return S.c_pqsh == 0
end

-- a room whose drop takes its sign-ups in shards
local function sharded()
  return (S.c_pqsh or 1) > 1
end

local function effective_state(wall)
  if S.c_state == 'bypass' then
    return 'bypass'
  end
  local opens = S.c_opens
  if opens ~= nil and wall < opens then
    return 'scheduled'
  end
  if HOLD then
    return 'paused'
  end
  return S.c_state
end

local function claim_window_ms()
  return math.min(CLAIM_WINDOW_SEC, S.c_pttl) * 1000
end

local function absent(seen, now)
  local presence = S.c_pres
  return presence ~= nil and now - seen >= presence * 1000
end

local function owns(holder, C)
  if holder.ck ~= nil and C.ck ~= nil then
    return holder.ck == C.ck
  end
  if C.fp == holder.fp then
    return true
  end
  return C.f2 ~= nil and holder.f2 ~= nil and C.f2 == holder.f2
end

local function slot_deadline(t)
  local deadline = t.pa + claim_window_ms()
  if not t.tl and S.c_pres ~= nil then
    deadline = math.min(deadline, t.sn + S.c_pres * 1000)
  end
  return deadline
end

local function session_deadline(t)
  local deadline = t.sla + S.c_sttl * 1000
  if S.c_smax ~= nil then
    deadline = math.min(deadline, t.ss + S.c_smax * 1000)
  end
  return deadline
end

local function occupancy()
  return redis.call('SCARD', K.ss) + redis.call('SCARD', K.sl)
end

local function active_bounced(now, older_than)
  local grace = (S.c_pres or BOUNCED_GRACE_SEC) * 1000
  local count = 0
  for _, m in ipairs(redis.call('SMEMBERS', K.bn)) do
    local n = tonumber(m)
    local t = getT(n)
    if t == nil or t.s ~= 'passed' or t.sl or t.ba == nil then
      redis.call('SREM', K.bn, m)
    elseif now - math.max(t.ba, t.sn) < grace and (older_than == nil or n < older_than) then
      count = count + 1  -- a claim lasts while its holder is seen; a lapsed one is kept, not counted
    end
  end
  return count
end

local function free_slots(now, older_than)
  local cap = S.c_maxc
  if cap == nil or S.c_qm == 'passthrough' then  -- passthrough: no limit
    return nil
  end
  return cap - occupancy() - active_bounced(now, older_than)
end

-- ------------------------------------------------------------------ priority lanes (engine/lanes.py)
-- c_lanes: '' (no lanes) or 'p'|'s' then '|id:number' per lane in order (lanes.encode_lanes). A lane's
-- places are a score range of K.ll: lane index (0-based) × LANE_SPAN + the place's line sequence, so each
-- lane keeps the line's order. S.lc holds the share lanes' deficit counters ('id=value,…', sorted, no zeros).

local LANE_SPAN = 1099511627776  -- 2^40
local LANES = nil

local function lanes()
  if LANES == nil then
    local spec = S.c_lanes or ''
    LANES = {share = string.sub(spec, 1, 1) == 's', list = {}, idx = {}}
    for id, v in string.gmatch(spec, '|([^:|]+):(%d+)') do
      local i = #LANES.list
      LANES.list[i + 1] = {id = id, v = tonumber(v)}
      LANES.idx[id] = i
    end
  end
  return LANES
end

local function has_lanes()
  return #lanes().list > 0
end

local function lane_lo(i)
  return I(i * LANE_SPAN)
end

local function lane_hi(i)
  return I((i + 1) * LANE_SPAN - 1)
end

local function lane_len(i)
  return redis.call('ZCOUNT', K.ll, lane_lo(i), lane_hi(i))
end

local function lane_head(i)
  local r = redis.call('ZRANGEBYSCORE', K.ll, lane_lo(i), lane_hi(i), 'LIMIT', 0, 1)
  if #r == 0 then
    return nil
  end
  return tonumber(r[1])
end

local function lane_nth(i, k)  -- the ticket at 0-based place k of lane i
  local base = redis.call('ZCOUNT', K.ll, '-inf', '(' .. lane_lo(i))
  local r = redis.call('ZRANGE', K.ll, base + k, base + k)
  return tonumber(r[1])
end

local function lane_push(t, lseq)  -- _lane_push
  local L = lanes()
  if #L.list == 0 then
    if t.ln ~= nil then
      t.ln = nil
    end
    return
  end
  if t.ln == nil or L.idx[t.ln] == nil then
    t.ln = L.list[1].id
  end
  redis.call('ZADD', K.ll, I(L.idx[t.ln] * LANE_SPAN + lseq), I(t.n))
end

local function lane_position(t)  -- lane_position (nil: not in a lane's line)
  local score = redis.call('ZSCORE', K.ll, I(t.n))
  if not score then
    return nil
  end
  local i = lanes().idx[t.ln]
  return redis.call('ZCOUNT', K.ll, lane_lo(i), score)
end

local function lane_ahead(ln)  -- view.lane_ahead: those waiting in the lanes a priority room releases first
  local L = lanes()
  local mine = L.idx[ln]
  if L.share or mine == nil then
    return 0
  end
  local p = L.list[mine + 1].v
  local count = 0
  for j, lane in ipairs(L.list) do
    local i = j - 1
    if i ~= mine and (lane.v > p or (lane.v == p and i < mine)) then
      count = count + lane_len(i)
    end
  end
  return count
end

local function decode_counters()
  local out = {}
  for k, v in string.gmatch(S.lc or '', '([^=,]+)=(-?%d+)') do
    out[k] = tonumber(v)
  end
  return out
end

local function encode_counters(c)
  local keys = {}
  for k, v in pairs(c) do
    if v ~= 0 then
      keys[#keys + 1] = k
    end
  end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do
    parts[#parts + 1] = k .. '=' .. I(c[k])
  end
  if #parts == 0 then
    return nil
  end
  return table.concat(parts, ',')
end

local function pick_lane(ready)  -- lanes.pick_lane; ready: lane id -> true
  local L = lanes()
  if not L.share then
    local best = nil
    for _, lane in ipairs(L.list) do
      if ready[lane.id] and (best == nil or lane.v > best.v) then
        best = lane
      end
    end
    return best and best.id
  end
  local c = decode_counters()
  local total = 0
  for _, lane in ipairs(L.list) do
    if ready[lane.id] then
      c[lane.id] = (c[lane.id] or 0) + lane.v
      total = total + lane.v
    else
      c[lane.id] = nil
    end
  end
  local chosen = nil
  for _, lane in ipairs(L.list) do
    if ready[lane.id] and (chosen == nil or c[lane.id] > c[chosen]) then
      chosen = lane.id
    end
  end
  if chosen == nil then
    return nil
  end
  c[chosen] = c[chosen] - total
  S.lc = encode_counters(c)
  return chosen
end

-- ------------------------------------------------------------------ the line feed
-- What this call changed in the waiting line, published once by done() on K.lf (keys.py): "+lseq" joined,
-- "-lseq" left, "c" the line emptied. Instances keep a replica of the line from it (store/valkey/replica.py).

local FEED = {}

local function feed(op)
  FEED[#FEED + 1] = op
end

-- ------------------------------------------------------------------ the line, Refs, heaps

local function line_push(n)
  S.lseq = (S.lseq or 0) + 1
  redis.call('ZADD', K.line, I(S.lseq), I(n))
  feed('+' .. I(S.lseq))
  lane_push(getT(n), S.lseq)
end

local function line_len()
  return redis.call('ZCARD', K.line)
end

local function line_head()
  local r = redis.call('ZRANGE', K.line, 0, 0)
  if #r == 0 then
    return nil
  end
  return tonumber(r[1])
end

local function position(n)
  local r = redis.call('ZRANK', K.line, I(n))
  if not r then
    return nil
  end
  return r + 1
end

local function refs_add(key, ref, n)
  if ref == nil then
    return
  end
  local cur = redis.call('HGET', key, ref)
  if cur then
    redis.call('HSET', key, ref, cur .. ',' .. I(n))
  else
    redis.call('HSET', key, ref, I(n))
  end
end

local function forget_ref(n, ref)  -- _forget_ref
  if ref == nil then
    return
  end
  local cur = redis.call('HGET', K.refs, ref)
  if not cur then
    return
  end
  local out = {}
  local removed = false
  for part in string.gmatch(cur, '[^,]+') do
    if not removed and tonumber(part) == n then
      removed = true
    else
      out[#out + 1] = part
    end
  end
  if #out == 0 then
    redis.call('HDEL', K.refs, ref)
  else
    redis.call('HSET', K.refs, ref, table.concat(out, ','))
  end
end

-- A lazy deadline heap as a zset: member "<n:012>:<deadline>", score deadline. Ties order by n,
-- exactly like the Python heap of (deadline, n) tuples; stale entries are skipped when popped.
local function hpush(key, deadline, n)
  redis.call('ZADD', key, I(deadline), string.format('%012d:%d', n, deadline))
end

local BUDGET = 0

-- the next entry due by `now`: its ticket number; nil when none is due; false when the budget of
-- this call is spent and more are due (the caller answers 'again' and the store calls once more)
local function pop_due(key, now)
  local r = redis.call('ZRANGEBYSCORE', key, '-inf', I(now), 'LIMIT', 0, 1)
  if #r == 0 then
    return nil
  end
  if BUDGET <= 0 then
    return false
  end
  BUDGET = BUDGET - 1
  redis.call('ZREM', key, r[1])
  return tonumber(string.match(r[1], '^(%d+):'))
end

-- ------------------------------------------------------------------ credit

local function settle_credit()  -- outflow.settle_credit
  if effective_state(NOW_WALL) == 'active' and S.c_rate > 0 then
    local elapsed = math.max(0, NOW - S.last)
    S.credit = math.min(SLOT, S.credit + S.c_rate * elapsed)
  else
    S.credit = math.min(SLOT, S.credit)
  end
  -- never moves back: instances whose clocks differ by a few ms never credit the same span twice
  S.last = math.max(S.last, NOW)
end

-- ------------------------------------------------------------------ transitions

local REF_WIDTH = 6  -- engine/ticket.py make_ref: six Crockford base32 characters

local function ref_for(n)
  if REFS_BASE == nil or REFS_GEN ~= S.gen then
    return nil
  end
  local at = (n - REFS_BASE) * REF_WIDTH
  if at < 0 or at + REF_WIDTH > #REFS_WINDOW then
    return nil
  end
  return string.sub(REFS_WINDOW, at + 1, at + REF_WIDTH)
end

local function charge(t)  -- _charge
  redis.call('HINCRBY', K.pi, t.id, 1)
  t.ch = true
end

local function uncharge(key, ident)
  local left = redis.call('HINCRBY', key, ident, -1)
  if left <= 0 then
    redis.call('HDEL', key, ident)
  end
end

-- Room.withdraw_prequeue, and the join it counted: a pre-queue entry leaves (a sign-up taken back, or a
-- shard's entry its room now holds). True when the entry was there.
local function withdraw_pre(h)
  local raw = redis.call('HGET', K.pq, h)
  if not raw then
    return false
  end
  redis.call('HDEL', K.pq, h)
  redis.call('ZREM', K.pqo, h)
  uncharge(K.ppi, cjson.decode(raw).id)
  S.pqver = (S.pqver or 0) + 1
  S.joins = S.joins - 1
  redis.call('ZREM', K.jt, 'h' .. h)
  return true
end

local function mint(ident, fp, f2, ck, joined, ret, charge_it, count, ref, lane)  -- _mint
  if line_len() == 0 then
    settle_credit()  -- credit earned while nobody waited banks at most one slot
  end
  local n = S.next
  S.next = n + 1
  local t = newT({
    n = n, id = ident, fp = fp, f2 = f2, ck = ck, j = joined, sn = NOW, ru = ret, rf = ref, ln = lane,
  })  -- waiting, pa, ss, sla, st: the defaults (T_DEFAULT)
  line_push(n)
  if charge_it then
    charge(t)
  end
  refs_add(K.refs, ref, n)
  if n <= ARCHIVE_KEEP then
    refs_add(K.aref, ref, n)
  end
  if count then
    S.joins = S.joins + 1
    redis.call('ZADD', K.jt, I(NOW), 'n' .. I(n))
  end
  return t
end

local function leave_line(t)  -- _leave_line
  local lseq = redis.call('ZSCORE', K.line, I(t.n))
  if lseq then
    redis.call('ZREM', K.line, I(t.n))
    feed('-' .. lseq)
  end
  if t.ln ~= nil then
    redis.call('ZREM', K.ll, I(t.n))
  end
  if t.ch then
    t.ch = nil
    uncharge(K.pi, t.id)
  end
end

local function grant_slot(t, slot, now)  -- _grant_slot
  if slot then
    t.sl = true
    redis.call('SADD', K.sl, I(t.n))
    hpush(K.hs, slot_deadline(t), t.n)
  else
    t.sl = nil
  end
end

-- the waits (pass minted - joined, ms) of the passes this call minted, oldest first, how many and their sum:
-- flush() appends them to K.wt, whose newest entry is then the wait of pass number S.passes, and adds the
-- sum to S.wsum once
local WAITS, WAITS_N, WAITS_SUM = {}, 0, 0

local function promote(t, slot, now)  -- promote
  leave_line(t)
  t.s = 'passed'
  t.pa = now
  if t.pm == nil then
    t.pm = NOW_WALL
    t.wm = math.max(0, NOW_WALL - t.j)
  end
  t.tl = nil
  t.ba = nil
  redis.call('SADD', K.ps, I(t.n))
  hpush(K.hp, now + S.c_pttl * 1000, t.n)
  grant_slot(t, slot, now)
  S.passes = S.passes + 1
  local waited = NOW_WALL - t.j
  if waited < 0 then
    waited = 0
  end
  WAITS_N = WAITS_N + 1
  WAITS[WAITS_N] = waited
  WAITS_SUM = WAITS_SUM + waited
  S.pseq = (S.pseq or 0) + 1
  if has_lanes() then
    local member = 'p' .. I(S.pseq)
    if t.ln ~= nil then
      member = member .. ':' .. t.ln  -- a lane's releases of the last minute (laneStats)
    end
    redis.call('ZADD', K.pt, I(now), member)
    emit('promote', {n = t.n, slot = slot, credit = S.credit, lc = decode_counters()})
  else
    redis.call('ZADD', K.pt, I(now), 'p' .. I(S.pseq))
    emit('promote', {n = t.n, slot = slot, credit = S.credit})
  end
end

local function drop_pass_and_session(t)  -- _drop_pass_and_session
  local m = I(t.n)
  redis.call('SREM', K.ps, m)
  redis.call('SREM', K.ss, m)
  redis.call('SREM', K.sl, m)
  redis.call('SREM', K.bn, m)
  t.sl = nil
  t.d = nil
  t.ba = nil
end

local function finish(t, reason)  -- _finish
  leave_line(t)
  drop_pass_and_session(t)
  local n = t.n
  delT(n)
  redis.call('HSET', K.fin, I(n), cjson.encode({j = t.j, pm = t.pm, wm = t.wm, r = reason, e = NOW_WALL, rf = t.rf}))
  S.fseq = (S.fseq or 0) + 1
  redis.call('ZADD', K.fo, I(S.fseq), I(n))
  while redis.call('ZCARD', K.fo) > FINISHED_KEEP do
    local gone = redis.call('ZPOPMIN', K.fo)[1]
    local rec = redis.call('HGET', K.fin, gone)
    redis.call('HDEL', K.fin, gone)
    if rec then
      forget_ref(tonumber(gone), cjson.decode(rec).rf)
    end
  end
end

local function admit(t, door, now)  -- admit
  local m = I(t.n)
  redis.call('SREM', K.ps, m)
  redis.call('SREM', K.sl, m)
  redis.call('SREM', K.bn, m)
  t.sl = nil
  t.ba = nil
  t.s = 'admitted'
  t.d = door
  t.ss = now
  t.sla = now
  t.st = now
  redis.call('SADD', K.ss, m)
  hpush(K.he, session_deadline(t), t.n)
  emit('admit', {n = t.n, door = door})
end

local function reclaim(t)  -- reclaim_session
  local now = NOW
  redis.call('SREM', K.ss, I(t.n))
  t.d = nil
  t.s = 'passed'
  t.pa = now
  t.tl = true
  redis.call('SADD', K.ps, I(t.n))
  hpush(K.hp, now + S.c_pttl * 1000, t.n)
  grant_slot(t, true, now)
  emit('reclaim', {n = t.n})
end

local function slide(t, now, journal)  -- slide
  t.sla = now
  if journal and now - t.st >= TOUCH_EVERY_MS then
    t.st = now
    emit('session.touch', {n = t.n})
  end
end

-- arrivals_last_minute: the bypass arrivals of the last minute, from the ab hash (field = second of
-- the monotonic clock, value = arrivals in it). A field counts while its second's first millisecond
-- would (last_minute's rule: s * 1000 > NOW - 60000); the older fields are deleted.
local function arrivals_last_minute()
  local cutoff = NOW - 60000
  local raw = redis.call('HGETALL', K.ab)
  local total = 0
  local old = {}
  for i = 1, #raw, 2 do
    if tonumber(raw[i]) * 1000 > cutoff then
      total = total + tonumber(raw[i + 1])
    else
      old[#old + 1] = raw[i]
    end
  end
  if #old > 0 then
    chunked('HDEL', K.ab, old, 400)
  end
  return total
end

-- a join or door check in bypass (count_arrival): into the per-minute window only, one HINCRBY on
-- the field of the current second. The first arrival of a second opens its field and drops the
-- fields that left the window, so the hash holds at most a minute's worth of fields however busy
-- the room is (tick and stats trim it too).
local function count_arrival()
  if redis.call('HINCRBY', K.ab, I(math.floor(NOW / 1000)), 1) == 1 then
    arrivals_last_minute()
  end
end

local function count_rule(index)  -- a URL-targeting rule matched: rule.matches += 1, last match now
  local cur = redis.call('HGET', K.rst, index)
  local matches = 0
  if cur then
    matches = tonumber(string.match(cur, '^(%d+)'))
  end
  redis.call('HSET', K.rst, index, I(matches + 1) .. ':' .. I(NOW_WALL))
end

-- ------------------------------------------------------------------ time

local function sweep(now)  -- sweep; false when the budget ran out with more due
  while true do
    local n = pop_due(K.hs, now)
    if n == false then
      return false
    end
    if n == nil then
      break
    end
    local t = getT(n)
    if t ~= nil and redis.call('SISMEMBER', K.sl, I(n)) == 1 then
      local real = slot_deadline(t)
      if real <= now then
        redis.call('SREM', K.sl, I(n))
        t.sl = nil
        if t.pa + S.c_pttl * 1000 > now then  -- else its expire (below) says it all
          emit('slot.release', {n = n})
        end
      else
        hpush(K.hs, real, n)
      end
    end
  end
  local ttl = S.c_pttl * 1000
  while true do
    local n = pop_due(K.hp, now)
    if n == false then
      return false
    end
    if n == nil then
      break
    end
    local t = getT(n)
    if t ~= nil and t.s == 'passed' then
      if t.pa + ttl <= now then
        finish(t, 'expired')
        emit('expire', {n = n})
      else
        hpush(K.hp, t.pa + ttl, n)
      end
    end
  end
  while true do
    local n = pop_due(K.he, now)
    if n == false then
      return false
    end
    if n == nil then
      break
    end
    local t = getT(n)
    if t ~= nil and t.s == 'admitted' then
      local real = session_deadline(t)
      if real <= now then
        finish(t, 'expired')
        emit('session.end', {n = n})
      else
        hpush(K.he, real, n)
      end
    end
  end
  return true
end

-- The drop's committed seed (K.draw, a hash): seed, com (its commitment), at (committed, wall ms),
-- opens (the instant committed for, '' none), prev ('<commitment>:<replaced at>' joined by ','); once
-- drawn: res (the draw as the store sent it: JSON order, handles, groups), dat (wall ms), first
-- (the first ticket it minted).
local function committed_seed()  -- the seed the next draw uses (drop.draw_seed), or nil
  local cur = redis.call('HMGET', K.draw, 'seed', 'dat')
  if cur[1] and not cur[2] then
    return cur[1]
  end
  return nil
end

local function draw_due()  -- the test in drop.maybe_draw
  -- a draw being applied is not due again (nor while tickets are finished in parts); a shard never draws
  if S.dro ~= nil or S.fqr ~= nil or is_shard() then
    return false
  end
  local opens = S.c_opens
  if opens ~= nil and NOW_WALL < opens then
    return false
  end
  if redis.call('HLEN', K.pq) > 0 then
    return true  -- a cancelled drop with people waiting opens now
  end
  -- a room whose drop took sign-ups in shards: due, whatever its own pre-queue holds, until the store has
  -- merged the shards into it for this drop (prequeue_merge.lua 'done' keeps the drop's seed in S.shd)
  local seed = committed_seed()
  return sharded() and seed ~= nil and S.shd ~= seed
end

local function commit_draw(seed, com)  -- commit_draw (after set_config: c_opens is the new instant)
  if seed == '' then
    return
  end
  local cur = redis.call('HMGET', K.draw, 'com', 'dat', 'prev')
  local prev = ''
  if cur[1] and not cur[2] then  -- a commitment not yet drawn is listed as replaced
    prev = cur[1] .. ':' .. I(NOW_WALL)
    if cur[3] and cur[3] ~= '' then
      prev = cur[3] .. ',' .. prev
    end
  end
  redis.call('UNLINK', K.draw)
  local opens = ''
  if S.c_opens ~= nil then
    opens = I(S.c_opens)
  end
  redis.call('HSET', K.draw, 'seed', seed, 'com', com, 'at', I(NOW_WALL), 'opens', opens, 'prev', prev)
end

local function draw_version()
  return I(S.gen) .. ':' .. I(S.pqver or 0) .. ':' .. I(S.next) .. ':' .. (committed_seed() or '')
end

-- The draw needs hashing Lua does not have: the script answers 'draw' with the pre-queue and the
-- committed seed, the store computes the order (qm-draw-v1, engine/draw.py) and calls again with it;
-- it is applied only if the pre-queue, the seed and the next ticket number are unchanged since (the
-- version), else asked again.
local DRAW = nil

-- The pre-queue in pages of DRAW_CHUNK (draw_page.lua reads them; draw_reply answers the first).
local function draw_entries(from, count)
  local handles = redis.call('ZRANGE', K.pqo, from, from + count - 1)
  local entries = {}
  if #handles > 0 then
    local raws = redis.call('HMGET', K.pq, unpack(handles))
    for i, h in ipairs(handles) do
      entries[i] = {h, cjson.decode(raws[i]).id}
    end
  end
  return entries
end

-- A pre-queue of more than DRAW_CHUNK is read in pages by one caller, which claims the draw (S.dcl,
-- mono ms) for 10 s plus 50 µs an entry: until then every other call of the room is answered
-- 'drawwait' (the store waits and asks again) instead of each reading the whole pre-queue and
-- computing the same order. A claimer that dies only delays the draw until the claim runs out; one
-- whose pages changed under it (a pre-queue entry taken back) asks again with its claim as DRAW_VER.
local function draw_reply()
  local count = redis.call('HLEN', K.pq)
  local reply = {k = 'draw', ver = draw_version(), gen = S.gen, next = S.next, seed = committed_seed(), count = count}
  local merge = sharded() and S.shd ~= reply.seed
  if merge then
    reply.shards = S.c_pqsh  -- the claimer merges the shards first (shard_merge.py), then asks again
  end
  if count > DRAW_CHUNK or merge then
    if (S.dcl or 0) > NOW and DRAW_VER ~= 'c' .. I(S.dcl) then  -- claimed, and not by this caller
      return cjson.encode({k = 'drawwait'})
    end
    local claim = NOW + 10000 + math.floor(count / 20)
    if merge then
      claim = claim + 20000  -- the shards' entries are not counted yet
    end
    redis.call('HSET', K.st, 'dcl', I(claim))
    reply.paged = count > DRAW_CHUNK
    reply.claim = 'c' .. I(claim)
  end
  reply.entries = draw_entries(0, DRAW_CHUNK)
  return cjson.encode(reply)
end

local function draw_ready()
  if DRAW_VER == '' or DRAW_VER ~= draw_version() then
    return false
  end
  -- DRAW_ORDER is kept as the record, never decoded here; DRAW_REFS carries what applying needs: the
  -- order and its Refs (o, r), or for a large draw how many of them draw_stage.lua put in K.dq / K.dr
  -- (n), its record waiting in K.drs
  local d = cjson.decode(DRAW_REFS)
  local count = redis.call('HLEN', K.pq)
  if d.n ~= nil then
    if d.n ~= count or redis.call('LLEN', K.dq) ~= count or redis.call('LLEN', K.dr) ~= count then
      return false
    end
    DRAW = {count = count, seed = opt(d.s), com = opt(d.c)}
    return true
  end
  if #d.o ~= count then
    return false
  end
  DRAW = {order = d.o, refs = d.r, count = count, seed = opt(d.s), com = opt(d.c)}
  return true
end

-- Drawn entries into the line at the numbers their places in the order give them (rs: their Refs),
-- with a few commands for all of them. An entry taken back (revoke.lua) while a large draw was being
-- applied leaves its number unused, as a revoked join does.
local function draw_entries_into_line(hs, rs)
  local raws = {}
  for i = 1, #hs, 512 do  -- the entries, 512 to a command (Lua's unpack has a stack limit)
    local part = {}
    for k = i, math.min(i + 511, #hs) do
      part[#part + 1] = hs[k]
    end
    local got = redis.call('HMGET', K.pq, unpack(part))
    for k = 1, #got do
      raws[i + k - 1] = got[k]
    end
  end
  local gone, drawn = {}, {}
  for i, h in ipairs(hs) do
    local raw = raws[i]
    if raw then
      local e = cjson.decode(raw)
      local t = mint(e.id, e.fp, e.f2, e.ck, e.j, e.ru, true, false, rs[i], e.ln)
      t.sn = e.sn
      gone[#gone + 1] = h
      drawn[#drawn + 1] = h
      drawn[#drawn + 1] = I(t.n)
    else
      S.next = S.next + 1
    end
  end
  chunked('HDEL', K.pq, gone, 512)
  chunked('ZREM', K.pqo, gone, 512)
  chunked('HSET', K.drawn, drawn, 512)
end

-- A draw of more than DRAW_CHUNK entries is applied DRAW_CHUNK entries per call, so Valkey never
-- answers nobody else for the whole of a large drop: the order and the Refs wait in K.dq / K.dr, S.dro
-- counts the entries applied of S.drn. Until the last part is in, every script through begin()
-- applies the next part and answers 'parts' (the store calls again), so no visitor of the room is
-- answered from a half-drawn line, and nobody is minted between two parts.
local function draw_step()
  local from = S.dro
  local upto = math.min(S.drn, from + DRAW_CHUNK)
  local hs = redis.call('LRANGE', K.dq, from, upto - 1)
  local rs = redis.call('LRANGE', K.dr, from, upto - 1)
  draw_entries_into_line(hs, rs)
  if upto >= S.drn then
    redis.call('UNLINK', K.dq, K.dr)
    S.dro, S.drn = nil, nil
  else
    S.dro = upto
  end
end

-- The event names how many were drawn from which ticket number on, not the order: the order is
-- qm-draw-v1 of the seed and the pre-queue the journal holds, so a replay computes it again
-- (engine/replay.py), and a large draw's event stays a few bytes.
local function apply_draw()  -- apply_draw: the record and the event at once; the entries at once or in parts
  local order = DRAW.order
  local first = S.next
  redis.call('UNLINK', K.ppi)
  S.pqver = (S.pqver or 0) + 1
  S.dcl = nil  -- the claim of the caller that read the pre-queue, if it was large
  local ev = {count = DRAW.count, first = first}
  if DRAW.seed ~= nil then  -- no seed was committed: the draw's own, published with it
    local opens = ''
    if S.c_opens ~= nil then
      opens = I(S.c_opens)
    end
    redis.call('UNLINK', K.draw)
    redis.call('HSET', K.draw, 'seed', DRAW.seed, 'com', DRAW.com, 'at', I(NOW_WALL), 'opens', opens, 'prev', '')
    ev.seed = DRAW.seed
  end
  local record = DRAW_ORDER
  if order == nil then  -- staged: the record waits in K.drs
    record = redis.call('GET', K.drs) or ''
    redis.call('UNLINK', K.drs)
  end
  if redis.call('EXISTS', K.draw) == 1 then
    redis.call('HSET', K.draw, 'res', record, 'dat', I(NOW_WALL), 'first', I(first))
  end
  emit('prequeue.draw', ev)
  if order == nil then  -- staged in K.dq / K.dr (a large draw): applied in parts from there
    S.dro, S.drn = 0, DRAW.count
    draw_step()
  else
    draw_entries_into_line(order, DRAW.refs)
  end
  DRAW = nil
end

local DRAW_NOW = false

local function advance()  -- advance: the draw when due, then the sweep (false: call again)
  if DRAW_NOW then
    DRAW_NOW = false
    apply_draw()
    if S.dro ~= nil then  -- a large draw, in parts: the next call goes on with it (begin)
      return false
    end
  end
  BUDGET = SWEEP_MAX
  return sweep(NOW)
end

-- ------------------------------------------------------------------ reading

-- the pre-queue entry of handle h, as resolve answers a token naming it (nil: no such entry here)
local function held_entry(h, C)
  local raw = redis.call('HGET', K.pq, h)
  if not raw then
    return nil
  end
  local e = cjson.decode(raw)
  if owns(e, C) then
    return {pre = e}
  end
  return {reason = 'not_owner'}
end

-- a script that only a pre-queue shard runs (shard_merge.py): the room opened as open_room does, refused
-- when it is not a shard
local function open_shard()
  local refused = open_room()
  if refused then
    return refused
  end
  if not is_shard() then
    return redis.error_reply('QM not_a_shard')
  end
  return nil
end

local function resolve(P, C)  -- resolve
  if P == nil then
    return {}
  end
  if is_shard() then
    -- a shard answers for the entries it holds while its pre-queue is open; anything else is its room's
    -- (the token names the room's generation, not the shard's)
    local held = P.h and S.sld == nil and effective_state(NOW_WALL) == 'scheduled' and held_entry(P.h, C)
    return held or {moved = true}
  end
  if P.gen ~= S.gen then
    return {reason = 'previous_generation'}
  end
  local n
  if P.h ~= nil then
    local held = held_entry(P.h, C)
    if held then
      return held
    end
    n = tonumber(redis.call('HGET', K.drawn, P.h) or '')
    if n == nil then
      if redis.call('ZSCORE', K.ph, P.h) then
        return {reason = 'purged'}
      end
      return {reason = 'expired'}
    end
  else
    n = P.n
  end
  local t = getT(n)
  if t ~= nil then
    if owns(t, C) then
      return {ticket = t, n = n}
    end
    return {n = n, reason = 'not_owner'}
  end
  local fin = redis.call('HGET', K.fin, I(n))
  if fin then
    local f = cjson.decode(fin)
    return {finished = f, n = n, reason = f.r}
  end
  return {n = n, reason = 'expired'}
end

local function describe(n)  -- the raw material of report.describe(); Python renders it
  local t = getT(n)
  if t == nil then
    local f = redis.call('HGET', K.fin, I(n))
    if not f then
      return nil
    end
    return {n = n, fin = cjson.decode(f)}
  end
  local d = {n = n, t = T_raw[n], pos = position(n), lanes = has_lanes() or nil}
  if t.s == 'passed' then
    d.pd = t.pa + S.c_pttl * 1000
  elseif t.s == 'admitted' then
    d.sd = session_deadline(t)
  end
  return d
end

local function mark_polled(found)  -- visitor.status's marks: the holder seen, told when a pass is shown
  if found.ticket ~= nil then
    local t = found.ticket
    t.sn = NOW
    if t.s == 'passed' then
      t.tl = true
    end
  elseif found.pre ~= nil then
    found.pre.sn = NOW
    save_pre(found.pre)
  end
end

local function view_payload(found)  -- the raw material of view.visitor_view()
  local out = {k = 'ok', eff = effective_state(NOW_WALL), reason = found.reason, n = found.n, new = found.new}
  if out.eff == 'scheduled' then
    local cur = redis.call('HMGET', K.draw, 'com', 'dat')
    if cur[1] and not cur[2] then
      out.dc = cur[1]
    end
  end
  if found.pre ~= nil then
    out.pre = found.pre
    out.pc = redis.call('HLEN', K.pq)
  elseif found.ticket ~= nil then
    local t = found.ticket
    out.t = T_raw[t.n]
    if t.s == 'waiting' and has_lanes() then  -- view.lane_view: within the lane
      out.pos = lane_position(t)
      out.la = lane_ahead(t.ln)
      if S.c_qm == 'random' then
        out.wl = lane_len(lanes().idx[t.ln])
      end
    elseif t.s == 'waiting' then
      out.pos = position(t.n)
      if S.c_qm == 'random' then
        out.wl = line_len()  -- a random line shows a range from its length, not a position
      end
    end
  elseif found.finished ~= nil then
    out.fin = found.finished
  end
  return out
end

local function client_at(i)
  return {id = ARGV[i], fp = ARGV[i + 1], f2 = opt(ARGV[i + 2]), ck = opt(ARGV[i + 3])}
end

local function presented_at(i)
  if ARGV[i] == '' then
    return nil
  end
  return {gen = tonumber(ARGV[i]), n = tonumber(ARGV[i + 1]), h = opt(ARGV[i + 2])}
end

-- ------------------------------------------------------------------ begin / done

local CFG_OUT = false

-- What import.lua and import_part.lua write of a checkpoint's payload (snapshot.py import_parts): each
-- hash, sorted set and set it carries, added to (a first part found them cleared).
local IMPORT_HASHES = {'t', 'pi', 'fin', 'refs', 'aref', 'pq', 'ppi', 'drawn', 'draw'}
local IMPORT_ZSETS = {'line', 'hp', 'hs', 'he', 'fo', 'pqo', 'ph', 'll'}
local IMPORT_SETS = {'ps', 'ss', 'sl', 'bn'}

local function import_lists(p)
  for _, name in ipairs(IMPORT_HASHES) do
    if p[name] ~= nil and #p[name] > 0 then
      chunked('HSET', K[name], p[name], 400)
    end
  end
  for _, name in ipairs(IMPORT_ZSETS) do
    if p[name] ~= nil and #p[name] > 0 then
      chunked('ZADD', K[name], p[name], 400)
    end
  end
  for _, name in ipairs(IMPORT_SETS) do
    if p[name] ~= nil and #p[name] > 0 then
      chunked('SADD', K[name], p[name], 400)
    end
  end
end

local function flush()
  if WAITS_N > 0 then
    S.wsum = (S.wsum or 0) + WAITS_SUM
    chunked('RPUSH', K.wt, WAITS, 512)
    redis.call('LTRIM', K.wt, -WAITS_KEPT, -1)
    WAITS, WAITS_N, WAITS_SUM = {}, 0, 0
  end
  local args = {}
  for k in pairs(S_dirty) do
    local v = S_raw[k]
    args[#args + 1] = k
    if v == nil then
      args[#args + 1] = ''
    elseif type(v) == 'number' then
      args[#args + 1] = I(v)
    else
      args[#args + 1] = v
    end
  end
  if #args > 0 then
    redis.call('HSET', K.st, unpack(args))
  end
  S_dirty = {}
  local put = {}
  for n in pairs(T_dirty) do
    local raw = T_raw[n]
    if raw then
      put[#put + 1] = I(n)
      put[#put + 1] = stored(raw)
    else
      redis.call('HDEL', K.t, I(n))
    end
  end
  if #put > 0 then
    chunked('HSET', K.t, put, 512)
  end
  T_dirty = {}
end

-- every event minted stays in the outbox until the journal holds it: the row its writer commits, so
-- the leader can commit it instead when the writer never does (a crash between mint and commit)
local function outbox(gen)
  if #EV == 0 then
    return
  end
  local put = {}
  for _, e in ipairs(EV) do
    put[#put + 1] = I(e[2])
    put[#put + 1] = cjson.encode({gen, e[1], e[2], e[3], e[4], WRITER})
  end
  chunked('ZADD', K.ob, put, 512)
end

-- one message per call that changed the line, the generation or the config (keys.py, lf)
local function publish_feed()
  if #FEED == 0 and not S_dirty.cv and not S_dirty.gen then
    return
  end
  S.lfs = (S.lfs or 0) + 1
  redis.call('SPUBLISH', K.lf, I(S.gen) .. ' ' .. I(S.lfs) .. ' ' .. I(S.cv) .. ' ' .. table.concat(FEED, ' '))
  FEED = {}
end

local function done(reply)
  publish_feed()
  flush()
  outbox(tonumber(S_raw.gen) or 0)
  reply.ev = EV
  reply.gen = S_raw.gen
  reply.next = S_raw.next
  reply.lf = S_raw.lfs
  if CFG_OUT then
    reply.cv = S_raw.cv
    reply.cfg = redis.call('GET', K.cfg)
  end
  return cjson.encode(reply)
end

-- Room.regroup_lanes (the lanes changed), DRAW_CHUNK tickets or entries a part: the waiting line's tickets
-- into their lanes' index (K.ll), a ticket of a lane that is gone into the first lane, then the pre-queue's
-- entries likewise. S.rgo / S.rgq: the next offset in the line / the pre-queue while parts are left.
local function regroup_step()
  local L = lanes()
  local fallback = nil
  if #L.list > 0 then
    fallback = L.list[1].id
  end
  local budget = DRAW_CHUNK
  if S.rgo ~= nil then
    local members = redis.call('ZRANGE', K.line, S.rgo, S.rgo + budget - 1, 'WITHSCORES')
    for j = 1, #members, 2 do
      local t = getT(tonumber(members[j]))
      if t.ln == nil or L.idx[t.ln] == nil then
        if t.ln ~= fallback then
          t.ln = fallback
        end
      end
      if fallback ~= nil then
        redis.call('ZADD', K.ll, I(L.idx[t.ln] * LANE_SPAN + tonumber(members[j + 1])), members[j])
      end
    end
    if #members == 2 * budget then
      S.rgo = S.rgo + budget
      return
    end
    budget = budget - #members / 2
    S.rgo, S.rgq = nil, 0
  end
  local handles = budget > 0 and redis.call('ZRANGE', K.pqo, S.rgq, S.rgq + budget - 1) or {}
  local raws = #handles > 0 and redis.call('HMGET', K.pq, unpack(handles)) or {}
  for j = 1, #handles do
    if raws[j] then
      local e = cjson.decode(raws[j])
      if e.ln ~= nil and L.idx[e.ln] == nil then
        e.ln = fallback
        save_pre(e)
      elseif e.ln == nil and fallback ~= nil then
        e.ln = fallback
        save_pre(e)
      end
    end
  end
  if budget > 0 and #handles < budget then
    S.rgq = nil
  else
    S.rgq = S.rgq + #handles
  end
end

local function regroup_lanes()  -- the lanes changed: the index anew, its first part now (parts_reply the rest)
  LANES = nil
  redis.call('UNLINK', K.ll)
  S.lc = nil
  S.rgo, S.rgq = 0, nil
  regroup_step()
end

-- Many tickets finished at once (a purge's line, a flush's passes and sessions) are finished DRAW_CHUNK at
-- a time: the operation empties what they were in at once (the line, the pass and session sets: the
-- room is as after it from then on, and its event says so) and puts them in K.fq in the order they are
-- finished; S.fqr is the reason while parts are left.
local function finish_step()
  local ns = redis.call('ZRANGE', K.fq, 0, DRAW_CHUNK - 1)
  for _, m in ipairs(ns) do
    local t = getT(tonumber(m))
    if t ~= nil then
      finish(t, S.fqr)
    end
  end
  if #ns > 0 then
    redis.call('ZREM', K.fq, unpack(ns))
  end
  if redis.call('EXISTS', K.fq) == 0 then
    S.fqr = nil
  end
end

local function finish_in_parts(reason)  -- K.fq holds the tickets: the first part now, the rest by parts_reply
  S.fqr = reason
  finish_step()
end

local function parts_pending()  -- a draw applied, tickets finished or lanes regrouped in parts, parts left
  return S.dro ~= nil or S.fqr ~= nil or S.rgo ~= nil or S.rgq ~= nil
end

-- The next part of a draw (draw_step), of tickets being finished (finish_step) or of lanes being regrouped
-- (regroup_step), answered 'parts': every script through begin() answers so until the last part is in,
-- and the store calls it again at once.
local function parts_reply()
  if S.dro ~= nil then
    draw_step()
  elseif S.fqr ~= nil then
    finish_step()
  else
    regroup_step()
  end
  return done({k = 'parts'})
end

-- The common start: refuse a fenced room, load the state, compare config versions (strict: answer
-- 'cfg' and change nothing; otherwise the reply carries the config), and prepare the draw.
local function begin(strict, advances)
  local refused = open_room()
  if refused then
    return refused
  end
  if WANT_CV ~= '*' and WANT_CV ~= I(S.cv) then
    if strict then
      return cjson.encode({k = 'cfg', cv = S.cv, gen = S.gen, cfg = redis.call('GET', K.cfg)})
    end
    CFG_OUT = true
  end
  if parts_pending() then
    return parts_reply()
  end
  if advances and draw_due() then
    if not draw_ready() then
      return draw_reply()
    end
    DRAW_NOW = true
  end
  return nil
end

local function err(code, extra)
  local reply = extra or {}
  reply.k = 'err'
  reply.code = code
  return done(reply)
end

-- visitor.join for one visitor, its 10 arguments from ARGV[i]: ident, fp, fp2, cookie, presented gen, n,
-- handle, return url, a fresh pre-queue handle, the lane a grant names ('' none: the default lane).
-- Re-presenting a held place returns it; anything else mints a ticket (or, before opensAt, a pre-queue
-- entry). The reply's raw material (view_payload), or a refusal {k = 'err', code = …}; the caller ends
-- the call (done). The Ref of every number it may mint is in the window (the caller checked).
-- A re-join that names another return URL than its ticket's or entry's (rec): kept, and journaled as
-- return.update naming the place (named: {n = …} or {h = …}).
local function new_return(rec, ret, named)
  if ret ~= nil and ret ~= rec.ru then
    rec.ru = ret
    named.ret = ret
    emit('return.update', named)
  end
end

local function join_visitor(i)
  local lane = opt(ARGV[i + 9])
  if lane ~= nil and lanes().idx[lane] == nil then
    return {k = 'err', code = 'unknown_lane', lane = lane}
  end
  if lane == nil and has_lanes() then
    lane = lanes().list[1].id
  end
  local C = client_at(i)
  local P = presented_at(i + 4)
  local ret = opt(ARGV[i + 7])
  local handle = ARGV[i + 8]

  if is_shard() and (S.sld ~= nil or effective_state(NOW_WALL) ~= 'scheduled') then
    return {k = 'moved'}  -- a shard takes sign-ups only while its pre-queue is open
  end
  local found = resolve(P, C)
  if found.moved then
    return {k = 'moved'}
  end
  if found.ticket ~= nil then
    local t = found.ticket
    t.sn = NOW
    new_return(t, ret, {n = t.n})
    if t.s == 'admitted' and C.ck ~= nil and t.ck == C.ck then
      reclaim(t)
    end
    return view_payload(found)
  end
  if found.pre ~= nil then
    local e = found.pre
    e.sn = NOW
    new_return(e, ret, {h = e.h})
    save_pre(e)
    return view_payload(found)
  end
  local state = effective_state(NOW_WALL)
  if state == 'bypass' then
    count_arrival()
    return view_payload({reason = found.reason})
  end
  if S.c_qm == 'reject' then  -- closed: nobody joins (visitor.room_closed)
    return {k = 'err', code = 'room_closed'}
  end
  if state == 'scheduled' then
    local limit = S.c_pqmax
    if limit ~= nil and tonumber(redis.call('HGET', K.ppi, C.id) or '0') >= limit then
      return {k = 'err', code = 'queue_identity_limit'}
    end
    local e = {h = handle, id = C.id, fp = C.fp, f2 = C.f2, ck = C.ck, j = NOW_WALL, sn = NOW, ru = ret, ln = lane}
    save_pre(e)
    S.pqseq = (S.pqseq or 0) + 1
    redis.call('ZADD', K.pqo, I(S.pqseq), handle)
    redis.call('HINCRBY', K.ppi, C.id, 1)
    S.pqver = (S.pqver or 0) + 1
    S.joins = S.joins + 1
    redis.call('ZADD', K.jt, I(NOW), 'h' .. handle)
    emit('prequeue.join', {
      h = handle, ident = C.id, fp = C.fp, fp2 = jnull(C.f2), ck = jnull(C.ck), joined = NOW_WALL, ret = jnull(ret),
      ln = lane,
    })
    return view_payload({pre = e, reason = found.reason, new = true})
  end
  local limit = S.c_qmax
  if limit ~= nil and tonumber(redis.call('HGET', K.pi, C.id) or '0') >= limit then
    return {k = 'err', code = 'queue_identity_limit'}
  end
  -- a full line (visitor.line_full): maxWaiting people, or the estimated wait of the place this join
  -- would take past maxWaitSec. Nobody in line is touched; the refusal is counted.
  local waiting = line_len()
  local passthrough = S.c_qm == 'passthrough'
  local full = not passthrough and S.c_wmax ~= nil and waiting >= S.c_wmax
  if not full and not passthrough and S.c_wsec ~= nil and state == 'active' and S.c_rate > 0 then
    full = math.max(1, math.ceil((waiting + 1) * 60 / S.c_rate)) > S.c_wsec
  end
  if full then
    S.refused = (S.refused or 0) + 1
    return {k = 'err', code = 'queue_full'}
  end
  local t = mint(C.id, C.fp, C.f2, C.ck, NOW_WALL, ret, true, true, ref_for(S.next), lane)
  t.r = found.reason
  emit('join', {
    n = t.n, reason = jnull(found.reason), ident = C.id, fp = C.fp, fp2 = jnull(C.f2), ck = jnull(C.ck),
    joined = NOW_WALL, ret = jnull(ret), ln = lane,
  })
  if passthrough and state == 'active' then  -- no line: the pass at once, counted like any other
    promote(t, false, NOW)
  end
  return view_payload({ticket = t, n = t.n, reason = found.reason, new = true})
end

-- the config fields the rules read, from the op's arguments starting at i (see config.py)
local CONFIG_FIELDS = {'c_state', 'c_rate', 'c_maxc', 'c_pttl', 'c_sttl', 'c_smax', 'c_pres', 'c_qmax', 'c_pqmax', 'c_wmax', 'c_wsec', 'c_qm', 'c_opens', 'c_rules', 'c_lanes', 'c_pqsh'}

local function set_config(i)
  LANES = nil
  for j, name in ipairs(CONFIG_FIELDS) do
    local v = ARGV[i + j - 1]
    if v == '' then
      S[name] = nil
    elseif NUMERIC[name] then
      S[name] = tonumber(v)
    else
      S[name] = v
    end
  end
  return i + #CONFIG_FIELDS
end

local function reschedule()  -- reschedule: fresh deadlines after a clock setting changed
  for _, m in ipairs(redis.call('SMEMBERS', K.ss)) do
    local t = getT(tonumber(m))
    hpush(K.he, session_deadline(t), t.n)
  end
  for _, m in ipairs(redis.call('SMEMBERS', K.sl)) do
    local t = getT(tonumber(m))
    hpush(K.hs, slot_deadline(t), t.n)
  end
  for _, m in ipairs(redis.call('SMEMBERS', K.ps)) do
    local t = getT(tonumber(m))
    hpush(K.hp, t.pa + S.c_pttl * 1000, t.n)
  end
  BUDGET = SWEEP_MAX
  sweep(NOW)  -- what the budget leaves is swept by the next call's advance
end

-- at most `limit` promotions (the call's budget: the tick answers 'more' and is called again)
local function clear_absent_heads(now, limit)  -- outflow._clear_absent_heads
  local count = 0
  for j, _ in ipairs(lanes().list) do
    while count < limit do
      local head = lane_head(j - 1)
      if head == nil then
        break
      end
      local t = getT(head)
      if not absent(t.sn, now) then
        break
      end
      promote(t, false, now)
      count = count + 1
    end
  end
  return count
end
