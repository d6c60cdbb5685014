-- settle-5: apply each run's outcome, fenced by its lease token, and count the
-- run in its task's circuit (settle_jobs).
-- KEYS[1] active      active jobs by lease_until
-- KEYS[2] delayed     delayed jobs by run_at
-- KEYS[3] circuits    tasks that have a circuit
-- KEYS[4] expiring    waiting jobs with a TTL
-- KEYS[5] wake        (channel) wake-up notifications
-- ARGV[1] key prefix; ARGV[2] number of settlements n; then n groups of 11:
--   job id, lease token, outcome (complete|retry|fail|cancel|release), task,
--   result|'', error JSON|'', failure reason|'', retry delay,
--   circuit threshold|'' (no circuit), circuit open_for, progress|''
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

for i = 0, n - 1 do
  local b = 2 + i * 11
  local id, token, outcome = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3]
  local key = jkey(id)
  local f = redis.call('HMGET', key, 's', 'lt', 'cr', 'q', 't', 'pr', 'ra', 'ttl', 'a')
  if f[1] ~= 'active' or f[2] ~= token then
    refused[#refused + 1] = id
  else
    local q, t = f[4], f[5]
    left_active[#left_active + 1] = id
    local final = outcome
    if f[3] == '1' and (outcome == 'retry' or outcome == 'release') then
      final = 'cancel'  -- a pending cancel wins: the job would wait again
      cancelled[#cancelled + 1] = id
    end
    local no_result = final == 'complete' and ARGV[b + 5] == ''
    if no_result then
      redis.call('HDEL', key, 'lu', 'lt', 'r')  -- one call for the common case
    else
      redis.call('HDEL', key, 'lu', 'lt')
    end
    if ARGV[b + 11] ~= '' then redis.call('HSET', key, 'pg', ARGV[b + 11]) end
    if ARGV[b + 6] ~= '' and outcome ~= 'complete' then append_error(key, ARGV[b + 6]) end
    local ttl = tonumber(f[8])
    if final == 'complete' then
      if no_result then
        redis.call('HSET', key, 's', 'completed', 'fa', nowtext)
      else
        redis.call('HSET', key, 's', 'completed', 'r', ARGV[b + 5], 'fa', nowtext)
      end
      completed[#completed + 1] = now
      completed[#completed + 1] = id
      bump(counts, q, 'active', 'completed')
    elseif final == 'retry' then
      local run_at = now + tonumber(ARGV[b + 8])
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
    else  -- release: back in its place, the attempt given back, a fresh TTL
      local attempts = math.max(0, (tonumber(f[9]) or 0) - 1)
      local ex = nil
      redis.call('HSET', key, 's', 'waiting', 'a', attempts)
      if ttl then
        ex = now + ttl
        redis.call('HSET', key, 'ex', fmt(ex))
      end
      redis.call('HDEL', key, 'w')
      enter_waiting(id, q, t, f[6], f[7], ex)
      bump(counts, q, 'active', 'waiting')
      woken[q] = true
    end
    -- The circuit counts the run as the worker reported it.
    if ARGV[b + 9] ~= '' and (outcome == 'complete' or outcome == 'retry' or outcome == 'fail') then
      count_run(t, tonumber(ARGV[b + 9]), tonumber(ARGV[b + 10]), outcome == 'complete')
    end
  end
end
call_many('ZREM', KEYS[1], left_active)
call_many('ZADD', donekey('completed'), completed)
flush(counts)
for q, _ in pairs(woken) do redis.call('PUBLISH', KEYS[5], 'q:' .. q) end
if timer then redis.call('PUBLISH', KEYS[5], 't:') end
return {refused, cancelled, changes}
