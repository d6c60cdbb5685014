-- claim-4: promote due delayed jobs, expire waiting jobs past their TTL, then
-- claim up to `limit` due jobs, priority DESC, run_at ASC, id ASC (claim_jobs).
-- KEYS[1] delayed    delayed jobs by run_at
-- KEYS[2] expiring   waiting jobs with a TTL, by expires_at
-- KEYS[3] active     active jobs by lease_until
-- KEYS[4] done:failed  failed jobs by finished_at
-- ARGV[1] key prefix
-- ARGV[2] worker id        ARGV[3] limit       ARGV[4] lease (seconds)
-- ARGV[5] lease token      ARGV[6] honour circuits (1/0)
-- ARGV[7] number of queues nq, then nq queue names
-- then the number of task caps nc, then nc pairs (task, cap)
-- then the number of rate limits nr, then nr triples (task, limit, period)
-- Returns {{field, value...} per claimed job}, {{field, value...} per expired job}.
local now = now_time()
local nowtext = fmt(now)
local worker, limit, lease, token = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local circuits_on = ARGV[6] == '1'
local pos = 7
local nq = tonumber(ARGV[pos]); pos = pos + 1
local queues = {}
for i = 1, nq do queues[i] = ARGV[pos]; pos = pos + 1 end
local caps = {}
local nc = tonumber(ARGV[pos]); pos = pos + 1
for _ = 1, nc do caps[ARGV[pos]] = tonumber(ARGV[pos + 1]); pos = pos + 2 end
local rates = {}
local nr = tonumber(ARGV[pos]); pos = pos + 1
for _ = 1, nr do
  rates[ARGV[pos]] = {tonumber(ARGV[pos + 1]), tonumber(ARGV[pos + 2])}
  pos = pos + 3
end
local counts = {}

-- 1. promote delayed jobs that are due (a bounded slice per call)
local due = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now, 'LIMIT', 0, 1000)
for _, id in ipairs(due) do
  local key = jkey(id)
  local f = redis.call('HMGET', key, 'q', 't', 'pr', 'ra', 'ex', 's')
  if f[6] == 'delayed' then
    redis.call('HSET', key, 's', 'waiting')
    enter_waiting(id, f[1], f[2], f[3], f[4], f[5])
    bump(counts, f[1], 'delayed', 'waiting')
  end
end
call_many('ZREM', K_DELAYED, due)

-- 2. expire waiting jobs past their TTL (G8: an expired job never starts)
local expired = {}
local gone = redis.call('ZRANGEBYSCORE', K_EXPIRING, '-inf', now, 'LIMIT', 0, 1000)
for _, id in ipairs(gone) do
  local key = jkey(id)
  local f = redis.call('HMGET', key, 's', 'q', 't', 'pr', 'ra', 'a')
  if f[1] == 'waiting' then
    redis.call('ZREM', wkey(f[2], f[3]), wmember(f[5], id))
    redis.call('HSET', key, 's', 'failed', 'fr', 'expired', 'fa', nowtext)
    append_error(key, json_error('Expired', 'queue TTL expired', f[6], 'expired', now))
    redis.call('ZADD', KEYS[4], now, id)
    bump(counts, f[2], 'waiting', 'failed')
    expired[#expired + 1] = job_row(id)
  end
end
call_many('ZREM', K_EXPIRING, gone)

local claimed = {}
if limit <= 0 then
  flush(counts)
  return {claimed, expired}
end

-- 3. what each task may take in this claim: cap, circuit, rate limit
local budgets = {}
local trials = {}
local function budget_of(t)
  local b = budgets[t]
  if b then return b end
  b = caps[t] or limit
  if circuits_on then
    local c = redis.call('HMGET', circuitkey(t), 'state', 'open_until')
    if c[1] and c[1] ~= 'closed' then
      if c[2] and tonumber(c[2]) > now then
        b = 0
      else
        b = math.min(b, 1)
        trials[t] = true
      end
    end
  end
  local rate = rates[t]
  if rate then
    local rk = ratekey(t)
    redis.call('ZREMRANGEBYSCORE', rk, '-inf', now - rate[2])
    b = math.min(b, rate[1] - redis.call('ZCARD', rk))
  end
  if b < 0 then b = 0 end
  budgets[t] = b
  return b
end

-- 4. candidates: the heads of each (queue, task) set the claim may take from
local cands = {}
local sources = 0
local seen_q = {}
for _, q in ipairs(queues) do
  if not seen_q[q] and redis.call('HGET', qckey(q), 'paused') ~= '1' then
    seen_q[q] = true
    for _, t in ipairs(redis.call('SMEMBERS', wtkey(q))) do
      local b = budget_of(t)
      if b > 0 then
        local wk = wkey(q, t)
        local head = redis.call('ZRANGE', wk, 0, math.min(b, limit) - 1, 'WITHSCORES')
        if #head == 0 then
          redis.call('SREM', wtkey(q), t)
        else
          sources = sources + 1
          for i = 1, #head, 2 do
            cands[#cands + 1] = {tonumber(head[i + 1]), head[i], q, t, wk}
          end
        end
      end
    end
  end
end
if sources > 1 then
  table.sort(cands, function(x, y)
    if x[1] ~= y[1] then return x[1] < y[1] end
    return x[2] < y[2]
  end)
end

-- 5. claim in that order within each task's budget
local lease_until = now + lease
local lutext = fmt(lease_until)
local removed = {}
local payload_keys = {}
local act = {}
local ids = {}
for _, c in ipairs(cands) do
  if #ids >= limit then break end
  local t = c[4]
  if budgets[t] > 0 then
    budgets[t] = budgets[t] - 1
    local member = c[2]
    local id = string.sub(member, 18)
    local key = jkey(id)
    local r = removed[c[5]]
    if not r then r = {}; removed[c[5]] = r end
    r[#r + 1] = member
    -- Read the row once, then write the changes and patch the copy we return.
    local row = redis.call('HGETALL', key)
    local attempts = 1
    for i = 1, #row, 2 do
      local name = row[i]
      if name == 'a' then
        attempts = tonumber(row[i + 1]) + 1
        row[i + 1] = attempts
      elseif name == 's' then
        row[i + 1] = 'active'
      end
    end
    redis.call('HSET', key, 'a', attempts, 's', 'active', 'lu', lutext, 'lt', token, 'w', worker,
      'sa', nowtext)
    local n_ = #row
    row[n_ + 1] = 'lu'; row[n_ + 2] = lutext
    row[n_ + 3] = 'lt'; row[n_ + 4] = token
    row[n_ + 5] = 'w'; row[n_ + 6] = worker
    row[n_ + 7] = 'sa'; row[n_ + 8] = nowtext
    row[n_ + 9] = 'id'; row[n_ + 10] = id
    payload_keys[#payload_keys + 1] = pkey(id)
    act[#act + 1] = lease_until
    act[#act + 1] = id
    ids[#ids + 1] = id
    bump(counts, c[3], 'waiting', 'active')
    if trials[t] then
      local ck = circuitkey(t)
      local open_for = tonumber(redis.call('HGET', ck, 'open_for')) or 0
      redis.call('HSET', ck, 'state', 'half_open', 'open_until', fmt(now + open_for))
      trials[t] = nil
    end
    local rate = rates[t]
    if rate then
      local rk = ratekey(t)
      redis.call('ZADD', rk, now, id .. ':' .. token)
      redis.call('PEXPIRE', rk, math.ceil(rate[2] * 1000) + 1000)
    end
    claimed[#claimed + 1] = row
  end
end
for first = 1, #payload_keys, 4000 do
  local last = math.min(first + 3999, #payload_keys)
  local payloads = redis.call('MGET', unpack(payload_keys, first, last))
  for i = first, last do
    local row = claimed[i]
    row[#row + 1] = 'p'
    row[#row + 1] = payloads[i - first + 1]
  end
end
for wk, members in pairs(removed) do call_many('ZREM', wk, members) end
call_many('ZREM', K_EXPIRING, ids)
add_active(KEYS[3], act)
flush(counts)
return {claimed, expired}
