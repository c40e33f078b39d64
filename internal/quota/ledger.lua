-- One quota decision, atomically. Mirrors policy.fits in quota.go.
-- KEYS: 1 window hash (second -> "t0,t1,t2,t3,r0,r1,r2,r3", and the
--         totals of those seconds: t0..t3, r0..r3, with lo: every second
--         before it has left the window),
--       2 held hash (id -> "class,tokens,second"), 3 held expiry zset,
--       4 held totals hash (t0..t3, r0..r3), 5 ceiling override hash,
--       6 the window of the layout before the totals (read, never written).
-- ARGV: 1 op (reserve|settle|release|snap), 2 id, 3 class, 4 tokens,
--       5 tpm, 6 rpm, 7 margin, 8..11 pauseAt P0..P3, 12..15 guaranteed P0..P3,
--       16 maxHold ms, 17 clock override ms ("" = Redis TIME),
--       18 concurrency cap (0 = none).
--
-- The window's totals are kept in it, so a decision reads nine fields
-- rather than parsing the minute's sixty buckets: a bucket's figures are
-- added when a call settles into it and taken off when its second leaves
-- the window. Totals and buckets share the key, so they expire together.
-- Only a refusal, which needs the buckets one by one to say when it would
-- fit, reads the whole window.
local WIN = 60
local op = ARGV[1]
local nowms
if ARGV[17] ~= '' then
  nowms = tonumber(ARGV[17])
else
  local t = redis.call('TIME')
  nowms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local nowsec = math.floor(nowms / 1000)
local maxhold = tonumber(ARGV[16])

local function parse(v)
  local a = {}
  for n in string.gmatch(v, '[^,]+') do a[#a + 1] = tonumber(n) end
  return a
end

local function zero() return {0, 0, 0, 0, 0, 0, 0, 0} end

local TTL = WIN * 1000 + 5000

-- Bring the window's totals to nowsec: the seconds that left the window
-- are taken off them and deleted. Totals that are missing, or older than
-- a window, are summed again from the buckets (at most a window's worth).
local function expireWindow()
  local first = nowsec - WIN + 1
  local s = redis.call('HMGET', KEYS[1], 'lo', 't0', 't1', 't2', 't3', 'r0', 'r1', 'r2', 'r3')
  local lo = tonumber(s[1])
  if lo and lo >= first then
    local u = {}
    for k = 1, 8 do u[k] = tonumber(s[k + 1]) or 0 end
    return u
  end
  local u = zero()
  if lo and first - lo <= WIN then
    for k = 1, 8 do u[k] = tonumber(s[k + 1]) or 0 end
    for sec = lo, first - 1 do
      local f = tostring(sec)
      local v = redis.call('HGET', KEYS[1], f)
      if v then
        local b = parse(v)
        for k = 1, 8 do u[k] = u[k] - b[k] end
        redis.call('HDEL', KEYS[1], f)
      end
    end
  else
    local all = redis.call('HGETALL', KEYS[1])
    for i = 1, #all, 2 do
      local sec = tonumber(all[i]) -- nil for the totals' fields
      if sec and sec >= first then
        local b = parse(all[i + 1])
        for k = 1, 8 do u[k] = u[k] + b[k] end
      elseif sec then
        redis.call('HDEL', KEYS[1], all[i])
      end
    end
  end
  redis.call('HSET', KEYS[1], 'lo', first, 't0', u[1], 't1', u[2], 't2', u[3], 't3', u[4],
    'r0', u[5], 'r1', u[6], 'r2', u[7], 'r3', u[8])
  redis.call('PEXPIRE', KEYS[1], TTL)
  return u
end

-- Return expired holds to the pool.
local function unhold(id, v)
  local h = parse(v)
  redis.call('HINCRBY', KEYS[4], 't' .. h[1], -h[2])
  redis.call('HINCRBY', KEYS[4], 'r' .. h[1], -1)
  redis.call('HDEL', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
  return h
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', nowms)
for _, id in ipairs(expired) do
  local v = redis.call('HGET', KEYS[2], id)
  if v then unhold(id, v) else redis.call('ZREM', KEYS[3], id) end
end
local win = expireWindow()

if op == 'settle' or op == 'release' then
  local v = redis.call('HGET', KEYS[2], ARGV[2])
  if not v then return {0} end
  local h = unhold(ARGV[2], v)
  local sec = h[3]
  if op == 'settle' and sec > nowsec - WIN and sec <= nowsec then
    local f = tostring(sec)
    local cur = redis.call('HGET', KEYS[1], f)
    local b = cur and parse(cur) or zero()
    local tk = tonumber(ARGV[4])
    b[h[1] + 1] = b[h[1] + 1] + tk
    b[h[1] + 5] = b[h[1] + 5] + 1
    redis.call('HSET', KEYS[1], f, table.concat(b, ','))
    redis.call('HINCRBY', KEYS[1], 't' .. h[1], tk)
    redis.call('HINCRBY', KEYS[1], 'r' .. h[1], 1)
    redis.call('PEXPIRE', KEYS[1], TTL)
  end
  return {1}
end

-- Ceiling in force.
local tpm, rpm = tonumber(ARGV[5]), tonumber(ARGV[6])
local ov = redis.call('HMGET', KEYS[5], 'tpm', 'rpm')
if ov[1] and ov[2] then tpm, rpm = tonumber(ov[1]), tonumber(ov[2]) end
if tpm <= 0 or rpm <= 0 then return {-1} end
local margin = tonumber(ARGV[7])
local LT = math.max(math.floor(tpm * margin), 1)
local LR = math.max(math.floor(rpm * margin), 1)

-- The live buckets of a hash of seconds.
local function liveBuckets(key)
  local live = {}
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    local sec = tonumber(all[i]) -- nil for the totals' fields
    if sec and sec > nowsec - WIN and sec <= nowsec then live[#live + 1] = {sec, parse(all[i + 1])} end
  end
  return live
end

-- Usage: the window's totals plus the outstanding holds, and, while an
-- instance of the layout before the totals settles into its window
-- (KEYS[6], during a rolling upgrade), that window's live buckets.
local u = zero()
for k = 1, 8 do u[k] = win[k] end
local legacy = redis.call('EXISTS', KEYS[6]) == 1
if legacy then
  for _, e in ipairs(liveBuckets(KEYS[6])) do
    for k = 1, 8 do u[k] = u[k] + e[2][k] end
  end
end
local agg = redis.call('HMGET', KEYS[4], 't0', 't1', 't2', 't3', 'r0', 'r1', 'r2', 'r3')
for k = 1, 8 do u[k] = u[k] + (tonumber(agg[k]) or 0) end

local function totals(x) return x[1] + x[2] + x[3] + x[4], x[5] + x[6] + x[7] + x[8] end
local ut, ur = totals(u)
local sat = math.max(ut / LT, ur / LR)

if op == 'snap' then
  return {ut, ur, LT, LR, tostring(sat)}
end

-- The concurrency cap: the holds outstanding are the calls in flight.
local cap = tonumber(ARGV[18]) or 0
local inflight = 0
for k = 5, 8 do inflight = inflight + (tonumber(agg[k]) or 0) end
if cap > 0 and inflight >= cap then
  local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
  local retry = 1000
  if first[2] then retry = math.min(math.max(tonumber(first[2]) - nowms, 1), 1000) end
  return {0, '1', retry, 'busy'}
end

local p = tonumber(ARGV[3])
local tk = tonumber(ARGV[4])
local function fits(x)
  local xt, xr = totals(x)
  if xt == 0 and xr == 0 then return true end
  local pause = tonumber(ARGV[8 + p])
  if not (xt + tk <= pause * LT and xr + 1 <= pause * LR) then
    local g = tonumber(ARGV[12 + p])
    if not (g > 0 and x[p + 1] + tk <= g * LT and x[p + 5] + 1 <= g * LR) then return false end
  end
  local rt, rr = 0, 0
  for c = 0, 3 do
    local g = tonumber(ARGV[12 + c])
    if c ~= p and g > 0 then
      rt = rt + math.max(0, g * LT - x[c + 1])
      rr = rr + math.max(0, g * LR - x[c + 5])
    end
  end
  return xt + tk + rt <= LT and xr + 1 + rr <= LR
end

if not fits(u) then
  -- When would it fit: take the window's seconds off, oldest first.
  local live = liveBuckets(KEYS[1])
  if legacy then
    for _, e in ipairs(liveBuckets(KEYS[6])) do live[#live + 1] = e end
  end
  table.sort(live, function(a, b) return a[1] < b[1] end)
  local retry = -1
  for _, e in ipairs(live) do
    for k = 1, 8 do u[k] = u[k] - e[2][k] end
    if fits(u) then retry = (e[1] + WIN) * 1000 - nowms break end
  end
  if retry < 0 then
    local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
    if first[2] then retry = math.max(tonumber(first[2]) - nowms, 1) else retry = 1000 end
  end
  return {0, tostring(sat), retry}
end

redis.call('HSET', KEYS[2], ARGV[2], p .. ',' .. tk .. ',' .. nowsec)
redis.call('ZADD', KEYS[3], nowms + maxhold, ARGV[2])
redis.call('HINCRBY', KEYS[4], 't' .. p, tk)
redis.call('HINCRBY', KEYS[4], 'r' .. p, 1)
for k = 2, 4 do redis.call('PEXPIRE', KEYS[k], maxhold + 5000) end
return {1}
