-- One breaker decision, atomically, on the Redis server's clock.
--
-- KEYS[1] state hash, KEYS[2] probe leases (zset: lease id -> expiry ms),
-- KEYS[3] pending closed-state calls of an unproven breaker (zset: id -> expiry ms).
-- ARGV: 1 op, 2 channel, 3 ttl ms, 4 failure_threshold, 5 success_threshold,
--       6 half_open_max_calls, 7 lease ms, 8 recovery ms, 9 backoff multiplier,
--       10 max recovery ms, 11 failure rate threshold (0: none), 12 minimum calls,
--       13 window ms, 14 cautious (1/0), 15 tool, 16 agent, 17 session, 18.. op arguments.
-- States: 0 closed, 1 open, 2 half-open. Outcomes: 0 success, 1 failure, 2 ignored.
-- Reply: {result, token, state, generation, retry ms, consecutive failures, free,
--         version, transition from (-1: none), reason, window calls, window failures}
-- result: 0 admitted, 1 admitted as a pending call (token), 2 probe (token = lease), -1 rejected.
-- 'report' (a worker's rejections and call durations, see redis_report.py) has its own
-- arguments: KEYS[1] state hash, KEYS[2] the worker's last report number; ARGV: 1 op,
-- 2 report number, 3 rejections, 4 bucket counts ("3,0,12,..." or ""), 5 slice ms,
-- 6 slices, 7 ms the report number is remembered. Reply: 1 added, 0 added before.
-- Time is the server's TIME; an op written "acquire@<ms>" runs at <ms> instead (tests only:
-- a reference model drives cooldowns from its fake clock).
if ARGV[1] == 'ping' then
  return 1
end
local H, L, P = KEYS[1], KEYS[2], KEYS[3]
-- ARGV[2] is "<origin>@<channel>": the publishing store's id rides along with the change,
-- so the store that made a change never mistakes it for another worker's.
local origin, channel = string.match(ARGV[2], '^(%x+)@(.+)$')
if not channel then
  origin, channel = '', ARGV[2]
end
-- 'access': every command the decisions below run, on this breaker's three keys and the
-- channel, each tried with redis.pcall and left as found (the fields and members are
-- removed again). Reply: one "COMMAND target: error" per refused command (empty: all
-- allowed). A Redis ACL user refused any of them would otherwise fail at its first opening.
if ARGV[1] == 'access' then
  local probes = {
    {'TIME'},
    {'HMGET', KEYS[1], 'access'}, {'HGET', KEYS[1], 'access'}, {'HSET', KEYS[1], 'access', '1'},
    {'HINCRBY', KEYS[1], 'access', '0'}, {'HDEL', KEYS[1], 'access'}, {'PEXPIRE', KEYS[1], '1000'},
    {'ZADD', KEYS[2], '0', 'access'}, {'ZCARD', KEYS[2]}, {'ZREMRANGEBYSCORE', KEYS[2], '-inf', '-inf'},
    {'ZREM', KEYS[2], 'access'}, {'GET', KEYS[3]}, {'SET', KEYS[3], '0', 'PX', '1000'}, {'DEL', KEYS[3]},
    {'PUBLISH', channel, ''},
  }
  local refused = {}
  for _, probe in ipairs(probes) do
    local reply = redis.pcall(unpack(probe))
    if type(reply) == 'table' and reply.err then
      table.insert(refused, probe[1] .. ' ' .. (probe[2] or '') .. ': ' .. reply.err)
    end
  end
  return refused
end
local op, at = string.match(ARGV[1], '^(%a+)@(%-?%d+)$')
local now
if op then
  now = tonumber(at)
else
  op = ARGV[1]
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if op == 'report' then
  local seq = tonumber(ARGV[2])
  if tonumber(redis.call('GET', KEYS[2]) or '0') >= seq then
    return 0 -- added already: the worker sends a report again when it did not hear the answer
  end
  redis.call('SET', KEYS[2], seq, 'PX', ARGV[7])
  if not redis.call('HGET', H, 'st') then
    return 1 -- the breaker expired or was deleted: nothing to add to, and no hash is made
  end
  local rejected = tonumber(ARGV[3])
  if rejected > 0 then
    redis.call('HINCRBY', H, 'rejected', rejected)
  end
  if ARGV[4] ~= '' then
    -- a ring of slices on the server's clock: a slot holding an older slice starts again
    local slice = math.floor(now / tonumber(ARGV[5]))
    local field = 'lh' .. (slice % tonumber(ARGV[6]))
    local counts = {}
    local kept = redis.call('HGET', H, field)
    if kept then
      local at, rest = string.match(kept, '^(%d+):(.*)$')
      if tonumber(at) == slice then
        for count in string.gmatch(rest, '%d+') do
          table.insert(counts, tonumber(count))
        end
      end
    end
    local index = 0
    for count in string.gmatch(ARGV[4], '%d+') do
      index = index + 1
      counts[index] = (counts[index] or 0) + tonumber(count)
    end
    redis.call('HSET', H, field, slice .. ':' .. table.concat(counts, ','))
  end
  return 1
end
local ttl = tonumber(ARGV[3])
local threshold = tonumber(ARGV[4])
local success_threshold = tonumber(ARGV[5])
local half_open_max = tonumber(ARGV[6])
local lease_ms = tonumber(ARGV[7])
local recovery = tonumber(ARGV[8])
local multiplier = tonumber(ARGV[9])
local max_recovery = tonumber(ARGV[10])
local rate_threshold = tonumber(ARGV[11])
local minimum_calls = tonumber(ARGV[12])
local width = tonumber(ARGV[13]) / 10
local cautious = ARGV[14] == '1'

local f = redis.call('HMGET', H, 'st', 'gen', 'cf', 'ou', 'ro', 'ps', 'nl', 'pv', 'ver', 'lc')
local st, gen, cf, ou, ro, ps, nl, pv, ver, lc
local dirty = false
if f[1] then
  st, gen, cf, ou, ro = tonumber(f[1]), tonumber(f[2]), tonumber(f[3]), tonumber(f[4]), tonumber(f[5])
  ps, nl, pv, ver, lc = tonumber(f[6]), tonumber(f[7]), tonumber(f[8]), tonumber(f[9]), tonumber(f[10])
else
  -- Generations and versions start at the server time, so a breaker whose key
  -- expired and was created again never goes back in time for any worker.
  st, gen, cf, ou, ro, ps, nl, pv, ver, lc = 0, now, 0, 0, 0, 0, 0, 0, now, now
  redis.call('HSET', H, 'tool', ARGV[15], 'agent', ARGV[16], 'session', ARGV[17], 'created', now)
  dirty = true
end

local published = false
local tr_from, tr_reason = -1, ''
local result, token = 0, 0
local wcalls, wfailures = -1, -1

local function cooldown(n)
  if n <= 0 or multiplier == 1 then
    return recovery
  end
  return math.floor(math.max(recovery, math.min(recovery * multiplier ^ n, max_recovery)))
end

local function window_add(failed)
  local epoch = math.floor(now / width)
  local slot = epoch % 10
  if tonumber(redis.call('HGET', H, 'we' .. slot)) ~= epoch then
    redis.call('HSET', H, 'we' .. slot, epoch, 'wc' .. slot, 0, 'wf' .. slot, 0)
  end
  redis.call('HINCRBY', H, 'wc' .. slot, 1)
  if failed then
    redis.call('HINCRBY', H, 'wf' .. slot, 1)
  end
end

local function window_totals()
  local oldest = math.floor(now / width) - 9
  local calls, failures = 0, 0
  for slot = 0, 9 do
    local v = redis.call('HMGET', H, 'we' .. slot, 'wc' .. slot, 'wf' .. slot)
    if v[1] and tonumber(v[1]) >= oldest then
      calls = calls + tonumber(v[2])
      failures = failures + tonumber(v[3])
    end
  end
  return calls, failures
end

local function transition(to, reason)
  local previous = st
  st = to
  gen = gen + 1
  ps = 0
  lc = now
  ver = ver + 1
  dirty = true
  published = true
  redis.call('DEL', L, P)
  if to == 0 then
    cf = 0
    ro = 0
    for slot = 0, 9 do
      redis.call('HDEL', H, 'we' .. slot, 'wc' .. slot, 'wf' .. slot)
    end
  end
  if previous ~= to then
    tr_from, tr_reason = previous, reason
  end
end

local function open(reason, until_ms)
  if until_ms then
    ou = until_ms
  else
    ou = now + cooldown(ro)
  end
  redis.call('HINCRBY', H, 'opened', 1)
  transition(1, reason)
end

local function set_proven(value)
  if pv ~= value then
    pv = value
    ver = ver + 1
    dirty = true
    published = true
  end
end

if op == 'acquire' then
  if st == 1 then
    if ou >= 0 and now >= ou then
      transition(2, 'cooldown_elapsed')
    else
      result = -1
    end
  end
  if st == 2 then
    -- a lease lives while now <= its expiry (now - handed out <= lease), as in memory
    redis.call('ZREMRANGEBYSCORE', L, '-inf', '(' .. now)
    if redis.call('ZCARD', L) < half_open_max then
      nl = nl + 1
      dirty = true
      redis.call('ZADD', L, now + lease_ms, nl)
      redis.call('PEXPIRE', L, ttl)
      result, token = 2, nl
    else
      result = -1
    end
  elseif st == 0 and cautious and pv ~= 1 then
    -- Not yet proven healthy: calls whose outcome is pending count against the
    -- threshold, so a dead tool never sees more than failure_threshold calls.
    redis.call('ZREMRANGEBYSCORE', P, '-inf', '(' .. now)
    if cf + redis.call('ZCARD', P) < threshold then
      nl = nl + 1
      dirty = true
      redis.call('ZADD', P, now + lease_ms, nl)
      redis.call('PEXPIRE', P, ttl)
      result, token = 1, nl
    else
      result = -1
    end
  end
elseif op == 'record' then
  local pgen, tok, outcome, kind = tonumber(ARGV[18]), tonumber(ARGV[19]), tonumber(ARGV[20]), ARGV[21]
  if outcome == 0 then
    redis.call('HINCRBY', H, 'successes', 1)
  elseif outcome == 1 then
    redis.call('HINCRBY', H, 'failures', 1)
  end
  if st ~= 0 and outcome ~= 2 then
    -- outside the closed state the streak decides nothing (closing clears it), so it
    -- stays what it is shown as: the failures since the last success
    if outcome == 0 then
      cf = 0
    else
      cf = cf + 1
    end
    dirty = true
  end
  if kind == 'p' then
    -- a probe counts only for its own half-open period and while its lease lives
    if st == 2 and pgen == gen and redis.call('ZREM', L, tok) == 1 then
      if outcome == 0 then
        ps = ps + 1
        dirty = true
        if ps >= success_threshold then
          pv = 1
          transition(0, 'probe_succeeded')
        end
      elseif outcome == 1 then
        ro = ro + 1
        open('probe_failed')
      end
    end
  else
    if tok > 0 then
      redis.call('ZREM', P, tok)
    end
    if pgen == gen and st == 0 and outcome ~= 2 then
      if outcome == 0 then
        if cf ~= 0 then
          cf = 0
          dirty = true
        end
        if cautious and pv ~= 1 then
          redis.call('DEL', P)
          set_proven(1)
        end
        if rate_threshold > 0 then
          window_add(false)
        end
      else
        cf = cf + 1
        dirty = true
        if cautious then
          set_proven(0)
        end
        if cf >= threshold then
          open('consecutive_failures=' .. cf)
        elseif rate_threshold > 0 then
          window_add(true)
          local calls, failures = window_totals()
          local rate = failures / calls
          if calls >= minimum_calls and rate >= rate_threshold then
            open(string.format('failure_rate=%.2f', rate))
          end
        end
      end
    end
  end
  if rate_threshold > 0 then
    wcalls, wfailures = window_totals()
  end
elseif op == 'open' then
  local duration = tonumber(ARGV[18])
  -- Why it opens: by hand, or one of the rules a worker judged alone (a retry hint, slow calls).
  local why = ARGV[19]
  if why ~= 'retry_after' and why ~= 'slow_call_rate' then
    why = 'manual'
  end
  if duration < 0 then
    open(why, -1)
  else
    open(why, now + duration)
  end
elseif op == 'close' then
  pv = 0
  transition(0, 'manual')
elseif op == 'reset' then
  pv = 0
  transition(0, 'reset')
  redis.call('HSET', H, 'successes', 0, 'failures', 0, 'opened', 0, 'rejected', 0)
elseif op == 'health' then
  -- a cooldown already over makes the breaker half-open, as a read would: the
  -- health check did not move it
  if st == 1 and ou >= 0 and now >= ou then
    transition(2, 'cooldown_elapsed')
  elseif st == 1 and ou >= 0 then
    transition(2, 'health_check_passed')
    result = 1
  end
elseif op == 'read' then
  if rate_threshold > 0 then
    wcalls, wfailures = window_totals()
  end
else
  return redis.error_reply('otel-breaker: unknown operation ' .. op)
end

if dirty then
  redis.call('HSET', H, 'st', st, 'gen', gen, 'cf', cf, 'ou', ou, 'ro', ro, 'ps', ps, 'nl', nl, 'pv', pv,
    'ver', ver, 'lc', lc)
end
redis.call('PEXPIRE', H, ttl)

local retry = 0
if st == 1 then
  if ou < 0 then
    retry = -1
  else
    retry = math.max(0, ou - now)
  end
elseif result == -1 then
  retry = math.min(1000, recovery)
end
local free = 0
if st == 0 and (pv == 1 or not cautious) then
  free = 1
end
if published then
  redis.call('PUBLISH', channel, ver .. '|' .. gen .. '|' .. st .. '|' .. retry .. '|' .. cf .. '|' .. free .. ':' .. origin .. '|' .. H)
end
return {result, token, st, gen, retry, cf, free, ver, tr_from, tr_reason, wcalls, wfailures}
