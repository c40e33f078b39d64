-- One breaker decision, atomically. The rules mirror machine.go exactly.
-- KEYS: state hash, probes hash (slot -> deadline µs), window hash
--       ("c:<step>"/"f:<step>" -> calls/failures per window step).
-- ARGV: op (allow|done|release|snap|state), gen, slot, success (1/0), ageUs, failureThreshold,
--       failureRate, minCalls, bucketUs, buckets, openUs, waitUs, ttlMs,
--       windowTtlMs, stages...
-- ageUs is how long ago the call was made (an outcome queued by a turn's
-- batch and sent with its next command): the decision is taken at that time.
-- Returns: allowed, state, gen, slot, retryUs, stage, stageProbes, admitted,
--          succeeded, inFlight, calls, failures, openedAt, then (from, to)
--          pairs for each transition made.
local K, KP, KW = KEYS[1], KEYS[2], KEYS[3]
local op = ARGV[1]
local pgen = tonumber(ARGV[2])
local pslot = tonumber(ARGV[3])
local success = ARGV[4] == '1'
local ageUs = tonumber(ARGV[5])
local threshold = tonumber(ARGV[6])
local rate = tonumber(ARGV[7])
local minCalls = tonumber(ARGV[8])
local bucketUs = tonumber(ARGV[9])
local nb = tonumber(ARGV[10])
local openUs = tonumber(ARGV[11])
local waitUs = tonumber(ARGV[12])
local ttlMs = tonumber(ARGV[13])
local windowTtlMs = tonumber(ARGV[14])
local stages = {}
for i = 15, #ARGV do stages[#stages + 1] = tonumber(ARGV[i]) end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) - ageUs

local v = redis.call('HMGET', K, 'st', 'gen', 'oa', 'stg', 'adm', 'ok', 'ns')
local st = tonumber(v[1]) or 0
local gen = tonumber(v[2]) or 0
local oa = tonumber(v[3]) or 0
local stg = tonumber(v[4]) or 0
local adm = tonumber(v[5]) or 0
local okc = tonumber(v[6]) or 0
local ns = tonumber(v[7]) or adm -- the next probe slot: a released one is not reused
if stg + 1 > #stages then stg = #stages - 1 end
local dirty = false
local trans = {}

local probes = {}
if st == 2 then
  local raw = redis.call('HGETALL', KP)
  for i = 1, #raw, 2 do probes[tonumber(raw[i])] = tonumber(raw[i + 1]) end
end

local function oldest()
  local m = nil
  for _, d in pairs(probes) do
    if m == nil or d < m then m = d end
  end
  return m
end

local function move(to)
  if to ~= st then
    trans[#trans + 1] = st
    trans[#trans + 1] = to
  end
  st = to
  gen = gen + 1
  stg, adm, okc, ns = 0, 0, 0, 0
  probes = {}
  redis.call('DEL', KP, KW)
  dirty = true
end

-- Transitions due to time alone, each at the instant it became due.
while true do
  if st == 1 and now >= oa + openUs then
    move(2)
  elseif st == 2 then
    local d = oldest()
    if d ~= nil and now >= d then
      move(1)
      oa = d
    else
      break
    end
  else
    break
  end
end

-- Outcomes in the window's last nb steps; stale steps are deleted.
local function window()
  local step = math.floor(now / bucketUs)
  local raw = redis.call('HGETALL', KW)
  local calls, fails = 0, 0
  local stale = {}
  for i = 1, #raw, 2 do
    local k = raw[i]
    local s = tonumber(string.sub(k, 3))
    if s <= step - nb then
      stale[#stale + 1] = k
    elseif s <= step then
      if string.sub(k, 1, 1) == 'c' then
        calls = calls + tonumber(raw[i + 1])
      else
        fails = fails + tonumber(raw[i + 1])
      end
    end
  end
  if #stale > 0 then redis.call('HDEL', KW, unpack(stale)) end
  return calls, fails
end

local allowed, slot, retry = 0, -1, 0
if op == 'allow' then
  if st == 0 then
    allowed = 1
  elseif st == 1 then
    retry = oa + openUs - now
  elseif adm < stages[stg + 1] then
    slot = ns
    ns = ns + 1
    adm = adm + 1
    probes[slot] = now + waitUs
    redis.call('HSET', KP, slot, string.format('%d', now + waitUs))
    redis.call('PEXPIRE', KP, ttlMs)
    dirty = true
    allowed = 1
  else
    local d = oldest()
    if d ~= nil then retry = d - now end
  end
elseif op == 'done' and pgen == gen then
  if st == 0 and pslot == -1 then
    local step = string.format('%d', math.floor(now / bucketUs))
    local fresh = redis.call('HINCRBY', KW, 'c:' .. step, 1) == 1
    if not success then redis.call('HINCRBY', KW, 'f:' .. step, 1) end
    redis.call('PEXPIRE', KW, windowTtlMs)
    -- A success never opens the breaker: the window is read on a failure,
    -- and on the first call of a step, which deletes the stale steps.
    if not success or fresh then
      local c, f = window()
      if not success and (f >= threshold or (c >= minCalls and f / c >= rate)) then
        move(1)
        oa = now
      end
    end
  elseif st == 2 and probes[pslot] ~= nil then
    probes[pslot] = nil
    redis.call('HDEL', KP, pslot)
    dirty = true
    if not success then
      move(1)
      oa = now
    else
      okc = okc + 1
      if okc >= stages[stg + 1] then
        if stg + 1 == #stages then
          move(0)
        else
          local nextStage = stg + 1
          move(2)
          stg = nextStage
        end
      end
    end
  end
elseif op == 'release' and pgen == gen and st == 2 and probes[pslot] ~= nil then
  -- Given back without a verdict: the stage admits another probe instead.
  probes[pslot] = nil
  redis.call('HDEL', KP, pslot)
  adm = adm - 1
  dirty = true
end

if dirty then
  redis.call('HSET', K, 'st', st, 'gen', gen, 'oa', string.format('%d', oa),
    'stg', stg, 'adm', adm, 'ok', okc, 'ns', ns)
  redis.call('PEXPIRE', K, ttlMs)
end

local calls, fails, inflight, stageProbes = 0, 0, 0, 0
if op == 'snap' or op == 'state' then
  -- 'state' is a snapshot without the window's counts, for the planner.
  if st == 0 and op == 'snap' then calls, fails = window() end
  for _ in pairs(probes) do inflight = inflight + 1 end
  if st == 2 then
    stageProbes = stages[stg + 1]
    if adm >= stageProbes then
      local d = oldest()
      if d ~= nil then retry = d - now end
    end
  elseif st == 1 then
    retry = oa + openUs - now
  end
end

local out = {allowed, st, gen, slot, retry, stg, stageProbes, adm, okc, inflight, calls, fails, oa}
for i = 1, #trans do out[#out + 1] = trans[i] end
return out
