-- settle-5: apply each run's outcome, fenced by its lease token, and count the
-- run in its task's circuit (settle_jobs).
-- KEYS[1] active      active jobs by lease_until
-- KEYS[2] delayed     delayed jobs by run_at
-- KEYS[3] circuits    tasks that have a circuit
-- KEYS[4] expiring    waiting jobs with a TTL
-- KEYS[5] wake        (channel) wake-up notifications
-- ARGV[1] key prefix; ARGV[2] number of settlements n; then n groups, in order,
-- each one of
--   job id, lease token, 'c' | 'c+': a completion without result or progress
--     (most runs), 'c+' counting it in the task's circuit (3 arguments)
--   job id, lease token, outcome (complete|retry|fail|cancel|release), task,
--     result|'', error JSON|'', failure reason|'', retry delay (a release
--     with a delay > 0 is delayed like a retry, its attempt given back),
--     circuit threshold|'' (no circuit), circuit open_for, progress|'' (11)
-- A job that ends completed, failed or cancelled and has dependents (flag dn,
-- read with its other fields) resolves them here (resolve_dependents, lib.lua:
-- their hashes, dep:<id>, blocked, delayed, expiring, w:/wt:, done:cancelled,
-- n:<queue>, and wake-ups for those released).
-- Every settled job gives back its (task, concurrency_key) slot (ka: sets,
-- lib.lua), whatever the outcome: none stays active.
-- Returns {refused ids}, {ids a pending cancel ended}, {{task, state,
-- failures, open_until|''} per circuit change}.
local now = now_time()
local nowtext = fmt(now)
local n = tonumber(ARGV[2])
local refused, cancelled, changes = {}, {}, {}
local counts = {}
local woken = {}
local timer = false
local left_active, completed = {}, {}
local slots = {}  -- the slots given back, per group
local finished = {}  -- jobs made terminal that have dependents
-- Tasks whose circuit a success of this batch left closed with no failures:
-- later successes would change nothing (most batches are all successes).
local clean = {}

local function count_run(t, threshold, open_for, success)
  if success and clean[t] then return end
  local ck = circuitkey(t)
  local c = redis.call('HMGET', ck, 'state', 'failures')
  local state = c[1]
  if success then
    clean[t] = true
    if not state then return end
    redis.call('HSET', ck, 'state', 'closed', 'failures', 0)
    redis.call('HDEL', ck, 'open_until')
    if state ~= 'closed' then changes[#changes + 1] = {t, 'closed', '0', ''} end
    return
  end
  clean[t] = nil
  state = state or 'closed'
  local failures = (tonumber(c[2]) or 0) + 1
  redis.call('HSET', ck, 'state', state, 'failures', failures, 'open_for', fmt(open_for))
  redis.call('SADD', KEYS[3], t)
  if state == 'half_open' or (state == 'closed' and threshold > 0 and failures >= threshold) then
    local until_ = fmt(now + open_for)
    redis.call('HSET', ck, 'state', 'open', 'open_until', until_)
    changes[#changes + 1] = {t, 'open', tostring(failures), until_}
  end
end

-- A completion without a result drops the lease fields and any stale result
-- in one call.
local function complete(key, id, q, result)
  if result == '' then
    redis.call('HDEL', key, 'lu', 'lt', 'r')
    redis.call('HSET', key, 's', 'completed', 'fa', nowtext)
  else
    redis.call('HDEL', key, 'lu', 'lt')
    redis.call('HSET', key, 's', 'completed', 'r', result, 'fa', nowtext)
  end
  left_active[#left_active + 1] = id
  completed[#completed + 1] = now
  completed[#completed + 1] = id
  bump(counts, q, 'active', 'completed')
end

-- Any outcome, from its group of 11 at ARGV[b + 1].
local function settle(b)
  local id, token, outcome = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3]
  local key = jkey(id)
  local f = redis.call('HMGET', key, 's', 'lt', 'cr', 'q', 't', 'pr', 'ra', 'ttl', 'a', 'dn',
    'ck', 'tn')
  if f[1] ~= 'active' or f[2] ~= token then
    refused[#refused + 1] = id
    return
  end
  local q, t = f[4], f[5]
  note_slot(slots, t, f[11], id)
  local final = outcome
  if f[3] == '1' and (outcome == 'retry' or outcome == 'release') then
    final = 'cancel'  -- a pending cancel wins: the job would wait again
    cancelled[#cancelled + 1] = id
  end
  if ARGV[b + 11] ~= '' then redis.call('HSET', key, 'pg', ARGV[b + 11]) end
  if final == 'complete' then
    complete(key, id, q, ARGV[b + 5])
  else
    redis.call('HDEL', key, 'lu', 'lt')
    left_active[#left_active + 1] = id
    if ARGV[b + 6] ~= '' then append_error(key, ARGV[b + 6]) end
  end
  local ttl = tonumber(f[8])
  local delay = tonumber(ARGV[b + 8])
  if final == 'release' and delay > 0 then
    -- Given back for later (a task this worker does not know): delayed like a
    -- retry, the attempt given back.
    final = 'retry'
    redis.call('HSET', key, 'a', math.max(0, (tonumber(f[9]) or 0) - 1))
  end
  if final == 'retry' then
    local run_at = now + delay
    redis.call('HSET', key, 's', 'delayed', 'ra', fmt(run_at))
    if ttl then redis.call('HSET', key, 'ex', fmt(run_at + ttl)) end
    redis.call('HDEL', key, 'w')
    redis.call('ZADD', KEYS[2], run_at, id)
    bump(counts, q, 'active', 'delayed')
    timer = true
  elseif final == 'fail' then
    local reason = ARGV[b + 7]
    if reason == '' then reason = 'error' end
    redis.call('HSET', key, 's', 'failed', 'fr', reason, 'fa', nowtext)
    redis.call('ZADD', donekey('failed'), now, id)
    bump(counts, q, 'active', 'failed')
  elseif final == 'cancel' then
    redis.call('HSET', key, 's', 'cancelled', 'fa', nowtext)
    redis.call('ZADD', donekey('cancelled'), now, id)
    bump(counts, q, 'active', 'cancelled')
  elseif final == 'release' then  -- back in its place, the attempt given back, a fresh TTL
    local attempts = math.max(0, (tonumber(f[9]) or 0) - 1)
    local ex = nil
    redis.call('HSET', key, 's', 'waiting', 'a', attempts)
    if ttl then
      ex = now + ttl
      redis.call('HSET', key, 'ex', fmt(ex))
    end
    redis.call('HDEL', key, 'w')
    enter_waiting(id, q, t, f[12], f[6], f[7], ex)
    bump(counts, q, 'active', 'waiting')
    woken[q] = true
  end
  if f[10] == '1' and final ~= 'retry' and final ~= 'release' then
    finished[#finished + 1] = id
  end
  -- The circuit counts the run as the worker reported it.
  if ARGV[b + 9] ~= '' and (outcome == 'complete' or outcome == 'retry' or outcome == 'fail') then
    count_run(t, tonumber(ARGV[b + 9]), tonumber(ARGV[b + 10]), outcome == 'complete')
  end
end

local b = 2
for _ = 1, n do
  local kind = ARGV[b + 3]
  if kind == 'c' or kind == 'c+' then
    local id = ARGV[b + 1]
    local key = jkey(id)
    local f = redis.call('HMGET', key, 's', 'lt', 'q', 't', 'dn', 'ck')
    if f[1] ~= 'active' or f[2] ~= ARGV[b + 2] then
      refused[#refused + 1] = id
    else
      note_slot(slots, f[4], f[6], id)
      complete(key, id, f[3], '')
      if f[5] == '1' then finished[#finished + 1] = id end
      if kind == 'c+' then count_run(f[4], 0, 0, true) end
    end
    b = b + 3
  else
    settle(b)
    b = b + 11
  end
end
call_many('ZREM', KEYS[1], left_active)
move_slots('SREM', slots)
call_many('ZADD', donekey('completed'), completed)
if #finished > 0 then
  timer = resolve_dependents(finished, now, counts, woken) or timer
end
flush(counts)
for q, _ in pairs(woken) do redis.call('PUBLISH', KEYS[5], 'q:' .. q) end
if timer then redis.call('PUBLISH', KEYS[5], 't:') end
return {refused, cancelled, changes}
