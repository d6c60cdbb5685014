-- Shared helpers, prepended to every script when it is loaded (scripts.py).
-- Key names mirror conveyor/backends/redis/keys.py: PFX is the app's hash-tagged
-- base ("{conveyor:<prefix>}:"), passed as ARGV[1] to every script, so every
-- key a script touches lives in one cluster slot.
local PFX = ARGV[1]
local function jkey(id) return PFX .. 'j:' .. id end
-- The payload lives in its own string: a hash holding a value over 64 bytes
-- stops being a compact listpack and costs ~3x the memory.
local function pkey(id) return PFX .. 'p:' .. id end
local function wkey(q, t) return PFX .. 'w:' .. #q .. ':' .. q .. ':' .. t end
local function wtkey(q) return PFX .. 'wt:' .. q end
local function nkey(q) return PFX .. 'n:' .. q end
local function qckey(q) return PFX .. 'qc:' .. q end
local function idemkey(k) return PFX .. 'idem:' .. k end
local function ratekey(t) return PFX .. 'rate:' .. t end
local function circuitkey(t) return PFX .. 'circuit:' .. t end
local function donekey(s) return PFX .. 'done:' .. s end
local function schedkey(n) return PFX .. 'sched:' .. n end
local function minutekey(m) return PFX .. 'sm:' .. m end
-- Direct handoff (see claim_for's callers): the idle workers of a queue, one
-- idle worker's claim request, and the jobs claimed for it, not yet taken.
local function idlekey(q) return PFX .. 'idle:' .. q end
local function iwkey(w) return PFX .. 'iw:' .. w end
local function inboxkey(w) return PFX .. 'inbox:' .. w end
-- Dependencies: the ids of the blocked jobs waiting for one job.
local function depkey(id) return PFX .. 'dep:' .. id end
-- Workflows: the ids of one workflow's jobs, 'wfj:<workflow id>' (a sorted set,
-- score 0, ordered like `all`), read by list_jobs with a workflow filter
-- instead of a walk over every job. Written with the jobs (enqueue-5; retry-3
-- only into a set that exists), members removed with their job (remove_job).
-- A workflow stored before the set existed has none: its readers scan.
local function wfkey(w) return PFX .. 'wfj:' .. w end
-- Per-key concurrency: the ids of the active jobs of one (task,
-- concurrency_key) group, the slots ClaimRequest.key_limits count. A job
-- without a key is in its task's group 'ka:<len>:<task>', one with key k in
-- 'ka:<len>:<task>:k' (field 'ck' of its hash).
local function slotkey(t, ck)
  if ck then return PFX .. 'ka:' .. #t .. ':' .. t .. ':' .. ck end
  return PFX .. 'ka:' .. #t .. ':' .. t
end
-- Rate limits per key: the start log (ZSET) of one (task, rate_limit_key)
-- window, ClaimRequest.key_rate_limits; 'rk:<len>:<task>' for the jobs without
-- a key, 'rk:<len>:<task>:k' for key k (field 'rk' of the job's hash).
local function ratewinkey(t, rk)
  if rk then return PFX .. 'rk:' .. #t .. ':' .. t .. ':' .. rk end
  return PFX .. 'rk:' .. #t .. ':' .. t
end
-- The index of a task's windows, read by rate_key_usage instead of a scan of
-- the keyspace: 'rki:<task>', a sorted set of window codes ('0' for the
-- keyless window, '1' .. k for key k) scored by the window's last start.
-- The claim keeps it in the step that logs a start, drops the members whose
-- last start has left the period (their windows count no start) and lets it
-- expire with the windows.
local function ratewinidx(t) return PFX .. 'rki:' .. t end
local function note_window(now, t, rk, period, trimmed)
  local head = ratewinkey(t, nil)
  local code = '0'
  if #rk > #head then code = '1' .. string.sub(rk, #head + 2) end
  local ix = ratewinidx(t)
  redis.call('ZADD', ix, now, code)
  if not trimmed[t] then  -- once per task and claim: `now` does not move
    trimmed[t] = true
    redis.call('ZREMRANGEBYSCORE', ix, '-inf', now - period)
    redis.call('PEXPIRE', ix, math.ceil(period * 1000) + 1000)
  end
end
-- Fair queues (fairness 'tenant'; the rule is in conveyor/backends/base.py).
-- A fair queue keeps its waiting jobs in one set per (queue, task, tenant),
-- 'fw:', scored and ordered like the per-task sets (w:), which it leaves
-- empty; 'ftk:<queue>' maps a tenant to its tasks that have waiting jobs
-- there (joined by NUL: a page of tenants is one HMGET);
-- 'fq:<queue>' the candidate tenants, those with waiting jobs, scored by their
-- pass, never below the queue's vtime (a tenant joins at its parked pass or
-- vtime, whichever is larger; the claim lifts the passes vtime overtook), so
-- that the set's own order, pass then tenant code, is the rule's order;
-- 'fs:<queue>' the pass of tenants that left fq with a pass above vtime;
-- 'qw:<queue>' tenant code -> weight. The queue's config hash (qc:) holds
-- 'fair' ('tenant'), the vtime 'fv' and the number of weights 'nw'. A tenant's code
-- is '0' for None and '1' .. name for a name: None first, then names in byte
-- order, which for UTF-8 is code point order. Empty sets are dropped lazily,
-- by the claim that finds them empty.
local function tcode(tn)
  if tn then return '1' .. tn end
  return '0'
end
local function fwkey(q, t, tc) return PFX .. 'fw:' .. #q .. ':' .. q .. ':' .. #t .. ':' .. t .. ':' .. tc end
local function ftkkey(q) return PFX .. 'ftk:' .. q end

-- A tenant's tasks (the value of its ftk: field) as a list, and back.
local function split_tasks(joined)
  if not joined then return {} end
  if not string.find(joined, '\0', 1, true) then return {joined} end  -- most: one task
  local out = {}
  for t in string.gmatch(joined, '[^%z]+') do out[#out + 1] = t end
  return out
end
local function fqkey(q) return PFX .. 'fq:' .. q end
local function fskey(q) return PFX .. 'fs:' .. q end
local function qwkey(q) return PFX .. 'qw:' .. q end

-- Whether queue q is fair, read once per script (configure-2 updates it).
local FAIR = {}
local function is_fair(q)
  local f = FAIR[q]
  if f == nil then
    f = redis.call('HGET', qckey(q), 'fair') == 'tenant'
    FAIR[q] = f
  end
  return f
end

local K_ALL = PFX .. 'all'
local K_DELAYED = PFX .. 'delayed'
local K_EXPIRING = PFX .. 'expiring'
local K_ACTIVE = PFX .. 'active'
local K_QUEUES = PFX .. 'queues'
local K_CIRCUITS = PFX .. 'circuits'
local K_WAKE = PFX .. 'wake'
local K_BLOCKED = PFX .. 'blocked'

-- The server's clock (G11); Redis 7 replicates a script's effects, not the script.
local function now_time()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

-- Exact text of a float (tostring keeps only 14 digits).
local function fmt(x) return string.format('%.17g', x) end

-- A waiting job's member in its (queue, task) sorted set: the score is -priority,
-- and members of one score sort by run_at (microseconds, fixed width), then id.
local function wmember(run_at, id)
  local micros = math.max(0, tonumber(run_at)) * 1000000
  return string.format('%017.0f', micros) .. id
end

-- Tenant tc of fair queue q has waiting jobs again: a candidate from now on,
-- at its parked pass or the queue's vtime, whichever is larger.
local function join_tenant(q, tc)
  local fq = fqkey(q)
  if redis.call('ZSCORE', fq, tc) then return end
  local fs = fskey(q)
  local v = tonumber(redis.call('HGET', qckey(q), 'fv')) or 0
  local p = tonumber(redis.call('HGET', fs, tc))
  if p then redis.call('HDEL', fs, tc) end
  if not p or p < v then p = v end
  redis.call('ZADD', fq, fmt(p), tc)
end

-- The set a waiting job of (queue q, task t, tenant tn) lives in.
local function waiting_set(q, t, tn)
  if is_fair(q) then return fwkey(q, t, tcode(tn)) end
  return wkey(q, t)
end

-- Register the set of (q, t, tn) with its queue's indexes (wt:, or ftk: and fq:).
local function note_waiting(q, t, tn)
  if is_fair(q) then
    local tc = tcode(tn)
    local fk = ftkkey(q)
    local joined = redis.call('HGET', fk, tc)
    if not joined then
      redis.call('HSET', fk, tc, t)
      join_tenant(q, tc)
    elseif not string.find('\0' .. joined .. '\0', '\0' .. t .. '\0', 1, true) then
      redis.call('HSET', fk, tc, joined .. '\0' .. t)
    end
  else
    redis.call('SADD', wtkey(q), t)
  end
end

local function enter_waiting(id, q, t, tn, pr, ra, ex)
  redis.call('ZADD', waiting_set(q, t, tn), -(tonumber(pr) or 0), wmember(ra, id))
  note_waiting(q, t, tn)
  if ex then redis.call('ZADD', K_EXPIRING, ex, id) end
end

local function leave_waiting(id, q, t, tn, pr, ra)
  redis.call('ZREM', waiting_set(q, t, tn), wmember(ra, id))
  redis.call('ZREM', K_EXPIRING, id)
end

-- The waiting sets of queue q, as {set key, task, tenant code|nil} (readers).
local function waiting_sets(q)
  local out = {}
  if is_fair(q) then
    local rows = redis.call('HGETALL', ftkkey(q))
    for i = 1, #rows, 2 do
      for _, t in ipairs(split_tasks(rows[i + 1])) do
        out[#out + 1] = {fwkey(q, t, rows[i]), t, rows[i]}
      end
    end
  else
    for _, t in ipairs(redis.call('SMEMBERS', wtkey(q))) do out[#out + 1] = {wkey(q, t), t} end
  end
  return out
end

-- Per-queue state counts, batched: bump(c, q, from, to) then flush(c).
local function bump(c, q, from, to)
  local row = c[q]
  if not row then row = {}; c[q] = row end
  if from then row[from] = (row[from] or 0) - 1 end
  if to then row[to] = (row[to] or 0) + 1 end
end

local function flush(c)
  for q, row in pairs(c) do
    for state, d in pairs(row) do
      if d ~= 0 then redis.call('HINCRBY', nkey(q), state, d) end
    end
  end
end

-- Append one JSON-encoded error to a job's JSON error list.
local function append_error(key, err)
  local old = redis.call('HGET', key, 'e')
  if not old or old == '' or old == '[]' then
    redis.call('HSET', key, 'e', '[' .. err .. ']')
  else
    redis.call('HSET', key, 'e', string.sub(old, 1, -2) .. ',' .. err .. ']')
  end
end

local function json_error(kind, message, attempt, reason, now)
  return '{"type":' .. cjson.encode(kind) .. ',"message":' .. cjson.encode(message)
    .. ',"traceback":"","attempt":' .. tostring(tonumber(attempt) or 0)
    .. ',"reason":' .. cjson.encode(reason) .. ',"at":' .. fmt(now) .. '}'
end

local TERMINAL = {completed = true, failed = true, cancelled = true}

-- Take a job out of the index of its current state.
local function unindex(id, s, q, t, tn, pr, ra)
  if s == 'waiting' then leave_waiting(id, q, t, tn, pr, ra)
  elseif s == 'delayed' then redis.call('ZREM', K_DELAYED, id)
  elseif s == 'active' then redis.call('ZREM', K_ACTIVE, id)
  elseif s == 'blocked' then redis.call('ZREM', K_BLOCKED, id)
  elseif TERMINAL[s] then redis.call('ZREM', donekey(s), id) end
end

-- Delete a job (never an active one: callers check); its idempotency key, if it
-- still points here, remembers the state the job had.
local function remove_job(id, counts)
  local key = jkey(id)
  local f = redis.call('HMGET', key, 's', 'q', 't', 'pr', 'ra', 'ik', 'tn', 'wf')
  -- Even for a row lost outside the scripts (an eviction, a manual DEL): its
  -- id must not stay taken in `all`, where enqueue looks ids up.
  redis.call('ZREM', K_ALL, id)
  if not f[1] then return false end
  if f[8] then redis.call('ZREM', wfkey(f[8]), id) end
  unindex(id, f[1], f[2], f[3], f[7], f[4], f[5])
  -- Its dependents set, if any: a completed job's is gone already, a failed
  -- or cancelled one's names jobs resolved already, a deleted live job's
  -- dependents stay blocked (as when its row is lost).
  redis.call('DEL', key, pkey(id), depkey(id))
  bump(counts, f[2], f[1], nil)
  if f[6] then
    local ik = idemkey(f[6])
    if redis.call('HGET', ik, 'id') == id then redis.call('HSET', ik, 'state', f[1]) end
  end
  return true
end

-- redis.call(cmd, key, list...) in slices: unpack has a stack limit.
local function call_many(cmd, key, list, step)
  step = step or 4000
  for i = 1, #list, step do
    redis.call(cmd, key, unpack(list, i, math.min(i + step - 1, #list)))
  end
end

-- Slot changes of a script, batched per group: note_slot(s, t, ck, id) for each
-- job that enters (or leaves) active, then move_slots('SADD' or 'SREM', s): one
-- call per group, however many jobs (most batches: one task, one group).
local function note_slot(slots, t, ck, id)
  local k = slotkey(t, ck)
  local ids = slots[k]
  if not ids then ids = {}; slots[k] = ids end
  ids[#ids + 1] = id
end

local function move_slots(cmd, slots)
  for k, ids in pairs(slots) do call_many(cmd, k, ids) end
end

-- The slots of group `k` held now, for a cap of `cap`. A group that looks full
-- is checked member by member: an id whose job is no longer active (its hash
-- lost outside the scripts, say) gives its slot back here, so a way out of
-- active that missed its SREM cannot keep a group full for good.
local function slots_held(k, cap)
  local n = redis.call('SCARD', k)
  if n < cap then return n end
  local stale = {}
  for _, id in ipairs(redis.call('SMEMBERS', k)) do
    if redis.call('HGET', jkey(id), 's') ~= 'active' then stale[#stale + 1] = id end
  end
  if #stale == 0 then return n end
  call_many('SREM', k, stale)
  return n - #stale
end

-- Dependencies (NewJob.depends_on). A blocked job sits in the `blocked` index
-- with 'pd', how many of its dependencies had not finished when it was stored;
-- each of those holds its id in its dependents set (dep:<id>) and carries the
-- flag dn=1. A script that makes a job terminal reads dn with the fields it
-- reads anyway and, for the few jobs that have it, calls resolve_dependents in
-- the same script: a job without dependents costs nothing more.
--
-- Resolve the blocked dependents of `finished` (ids of jobs just made terminal,
-- each with dn=1). A dependent whose last unfinished dependency this was is
-- released: waiting (run_at now, a fresh TTL from now), or delayed while its
-- run_at is still ahead. One whose dependency failed or was cancelled, under
-- policy cancel, is cancelled 'dependency_failed' and, having dependents of its
-- own, joins the work list: a chain of any length, no recursion. Each set is
-- read and deleted once, so a dependency counts once whatever runs at the same
-- moment. Bumps `counts`, marks the queues of released waiting jobs in `woken`;
-- returns true when a released job is delayed (a new timer).
local function resolve_dependents(finished, now, counts, woken)
  local nowtext = fmt(now)
  local timer = false
  local i = 1
  while i <= #finished do
    local id = finished[i]
    i = i + 1
    local dk = depkey(id)
    local dependents = redis.call('SMEMBERS', dk)
    if #dependents > 0 then
      local completed = redis.call('HGET', jkey(id), 's') == 'completed'
      -- A failed or cancelled job keeps its set (read once all the same: it
      -- never finishes again), for a dead-letter retry to find the dependents
      -- it cancelled (retry-3); deleting the job deletes the set.
      if completed then redis.call('DEL', dk) end
      for _, d in ipairs(dependents) do
        local key = jkey(d)
        local f = redis.call('HMGET', key, 's', 'of', 'q', 't', 'pr', 'ra', 'ttl', 'dn', 'tn')
        if f[1] == 'blocked' then
          local q = f[3]
          if completed or f[2] == 'run' then
            if redis.call('HINCRBY', key, 'pd', -1) <= 0 then
              redis.call('ZREM', K_BLOCKED, d)
              local ra = tonumber(f[6])
              if ra > now then
                redis.call('HSET', key, 's', 'delayed')
                redis.call('ZADD', K_DELAYED, ra, d)
                bump(counts, q, 'blocked', 'delayed')
                timer = true
              else
                local ex = nil
                redis.call('HSET', key, 's', 'waiting', 'ra', nowtext)
                if f[7] then
                  ex = now + tonumber(f[7])
                  redis.call('HSET', key, 'ex', fmt(ex))
                end
                enter_waiting(d, q, f[4], f[9], f[5], nowtext, ex)
                bump(counts, q, 'blocked', 'waiting')
                woken[q] = true
              end
            end
          else
            redis.call('ZREM', K_BLOCKED, d)
            redis.call('HSET', key, 's', 'cancelled', 'fr', 'dependency_failed', 'fa', nowtext)
            redis.call('ZADD', donekey('cancelled'), now, d)
            bump(counts, q, 'blocked', 'cancelled')
            if f[8] == '1' then finished[#finished + 1] = d end
          end
        end
      end
    end
  end
  return timer
end

-- The wake-ups of what resolve_dependents released.
local function publish_released(woken, timer)
  for q, _ in pairs(woken) do redis.call('PUBLISH', K_WAKE, 'q:' .. q) end
  if timer then redis.call('PUBLISH', K_WAKE, 't:') end
end

-- The active index keeps one member longer than zset-max-listpack-value with an
-- infinite score, so Redis stores it as a skiplist for good: a small listpack
-- sorted set with float scores costs ~8 us per inserted member (a linear scan
-- that parses every score), a skiplist ~0.5 us. Readers never see it: stall
-- recovery reads scores below now, everything else names its ids.
local ACTIVE_ANCHOR = string.rep('~', 80)
local function add_active(key, list)
  if #list == 0 then return end
  redis.call('ZADD', key, 'NX', 'inf', ACTIVE_ANCHOR)
  call_many('ZADD', key, list)
end

-- A job as {field, value...}, its id included (the hash does not store it),
-- and its payload unless the payload key is gone.
local function job_row(id)
  local row = redis.call('HGETALL', jkey(id))
  if #row == 0 then return row end
  row[#row + 1] = 'id'
  row[#row + 1] = id
  local payload = redis.call('GET', pkey(id))
  if payload then
    row[#row + 1] = 'p'
    row[#row + 1] = payload
  end
  return row
end

-- The jobs of one claim as a lease group: {lease_until, lease_token, worker_id,
-- started_at, rows}. The four values every row of the claim shares travel
-- once, not in each row: replies are a large part of a claim's cost.
local function lease_group(lease_until, token, worker, started_at, rows)
  return {lease_until, token, worker, started_at, rows}
end

-- The claim itself, shared by claim-4 (a worker asks) and enqueue-5 (a direct
-- handoff to an idle worker): promote due delayed jobs, expire waiting jobs past
-- their TTL, then claim up to `limit` due jobs of `queues`, priority DESC,
-- run_at ASC, id ASC, within per-task caps, circuits, rate limits and per-key
-- caps (`keycaps`: task -> the most active jobs per concurrency key; a full
-- group is skipped, the jobs behind it are taken) and per-key rate limits
-- (`keyrates`: task -> {limit, period} per rate_limit_key window; a spent
-- window is skipped the same way). Every claimed job takes its
-- group's slot (the ka: set), capped or not: slots count every active job. Expired
-- jobs resolve their dependents (and publish the wake-ups of those released).
-- Bumps `counts`; returns the claimed jobs as a lease group and the expired rows
-- ({field, value...}).
local function claim_for(now, worker, limit, lease, token, circuits_on, queues, caps, rates,
    keycaps, keyrates, counts)
  local nowtext = fmt(now)

  -- 1. promote delayed jobs that are due (a bounded slice per call)
  local due = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now, 'LIMIT', 0, 1000)
  for _, id in ipairs(due) do
    local key = jkey(id)
    local f = redis.call('HMGET', key, 'q', 't', 'pr', 'ra', 'ex', 's', 'tn')
    if f[6] == 'delayed' then
      redis.call('HSET', key, 's', 'waiting')
      enter_waiting(id, f[1], f[2], f[7], f[3], f[4], f[5])
      bump(counts, f[1], 'delayed', 'waiting')
    end
  end
  call_many('ZREM', K_DELAYED, due)

  -- 2. expire waiting jobs past their TTL (G8: an expired job never starts)
  local expired = {}
  local finished = {}  -- expired jobs that have dependents
  local gone = redis.call('ZRANGEBYSCORE', K_EXPIRING, '-inf', now, 'LIMIT', 0, 1000)
  for _, id in ipairs(gone) do
    local key = jkey(id)
    local f = redis.call('HMGET', key, 's', 'q', 't', 'pr', 'ra', 'a', 'dn', 'tn')
    if f[1] == 'waiting' then
      redis.call('ZREM', waiting_set(f[2], f[3], f[8]), wmember(f[5], id))
      redis.call('HSET', key, 's', 'failed', 'fr', 'expired', 'fa', nowtext)
      append_error(key, json_error('Expired', 'queue TTL expired', f[6], 'expired', now))
      redis.call('ZADD', donekey('failed'), now, id)
      bump(counts, f[2], 'waiting', 'failed')
      expired[#expired + 1] = job_row(id)
      if f[7] == '1' then finished[#finished + 1] = id end
    end
  end
  call_many('ZREM', K_EXPIRING, gone)
  -- Their dependents are cancelled (or released, policy run) before the claim
  -- looks for work, so a released job may go in this very claim.
  if #finished > 0 then
    local woken = {}
    publish_released(woken, resolve_dependents(finished, now, counts, woken))
  end

  local claimed = {}
  local lease_until = now + lease
  local lutext = fmt(lease_until)
  local group = lease_group(lutext, token, worker, nowtext, claimed)
  if limit <= 0 then return group, expired end

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

  -- Slots held per group (ka: key) as this claim goes, read once per group.
  local held = {}
  local function held_in(k, cap)
    local n = held[k]
    if not n then
      n = slots_held(k, cap)
      held[k] = n
    end
    return n
  end

  -- Starts per rate window (rk: key) as this claim goes, read once per window.
  local rheld = {}
  local indexed = {}  -- tasks whose window index this claim has trimmed (note_window)
  local function starts_in(k, period)
    local n = rheld[k]
    if not n then
      redis.call('ZREMRANGEBYSCORE', k, '-inf', now - period)
      n = redis.call('ZCARD', k)
      rheld[k] = n
    end
    return n
  end

  -- The first `want` jobs of a capped or key-rated task's set `wk` whose group
  -- has a free slot (`cap`) and whose rate window has room (`rate`), walking
  -- past the others: each a candidate with its group's and window's keys (nil
  -- for a limit the task has not). Nil when the set is empty.
  local function free_heads(wk, t, cap, rate, want)
    local taken = {}  -- per group, as if every earlier candidate were claimed
    local rtaken = {}  -- per rate window, likewise
    local found = {}
    local start = 0
    local page = math.max(want * 2, 64)
    while #found < want do
      local chunk = redis.call('ZRANGE', wk, start, start + page - 1, 'WITHSCORES')
      if #chunk == 0 then
        if start == 0 then return nil end
        break
      end
      for i = 1, #chunk, 2 do
        local member = chunk[i]
        local f = redis.call('HMGET', jkey(string.sub(member, 18)), 'ck', 'rk')
        local k = cap and slotkey(t, f[1]) or nil
        local rk = rate and ratewinkey(t, f[2]) or nil
        local n = k and (taken[k] or held_in(k, cap)) or 0
        local rn = rk and (rtaken[rk] or starts_in(rk, rate[2])) or 0
        if (not k or n < cap) and (not rk or rn < rate[1]) then
          found[#found + 1] = {tonumber(chunk[i + 1]), member, k, rk}
          if k then taken[k] = n + 1 end
          if rk then rtaken[rk] = rn + 1 end
          if #found >= want then break end
        end
      end
      start = start + page
    end
    return found
  end

  -- Fair queues: each a stream of jobs in the rule's order, merged into the
  -- claim below. fq is read in pages and not written until the claim ends
  -- (so its ranks hold still): the tenants examined so far sit in `seen`, with
  -- the pass they have in this claim; the next tenant is the smaller, by
  -- (pass, tenant code), of the first unexamined one of fq and the best
  -- examined one still claimable (a heap). A tenant found with nothing claimable stays
  -- so for the rest of the claim (budgets and free slots only shrink, rate
  -- windows only fill). A job taken leaves its tenant set at once (the next
  -- look reads from the top), except from the set of a tenant with one task
  -- and no key cap or per-key rate limit: that set is
  -- popped into `popped` (1 job, then twice as many at each refill: a tenant
  -- served again and again in one claim costs a few calls, not one per job),
  -- and what the claim did not take goes back at the end.
  local removed = {}  -- plain set key -> members claimed from it
  local popped = {}   -- tenant set key -> {rows = {member, score...}, at, n}

  -- The first claimable job of examined tenant `e` of stream `st` (a
  -- candidate {score, member, q, t, set key, group key|nil, tenant, pass,
  -- its `popped` buffer|nil, rate window key|nil}), or nil; the second value
  -- tells whether it has waiting jobs at all.
  local function tenant_head(st, e)
    local q, tc = st.q, e.tc
    local tasks = e.tasks
    local best = nil
    local any = false
    local i = 1
    local changed = false
    while i <= #tasks do
      local t = tasks[i]
      local wk = fwkey(q, t, tc)
      local c = nil
      local empty = false
      local cap = keycaps[t]
      local krate = keyrates[t]
      local buf = popped[wk]
      if budget_of(t) <= 0 then
        if (buf and buf.at <= #buf.rows) or redis.call('EXISTS', wk) == 1 then
          any = true
        else
          empty = true
        end
      elseif cap or krate then
        -- past full groups and spent rate windows: a tenant with jobs but
        -- none claimable is blocked, not drained (no credit either way)
        local found = free_heads(wk, t, cap, krate, 1)
        if not found then
          empty = true
        else
          any = true
          if found[1] then
            c = {found[1][1], found[1][2], q, t, wk, found[1][3]}
            c[10] = found[1][4]
          end
        end
      else
        if #tasks == 1 or buf then
          if not buf or buf.at > #buf.rows then
            local n = buf and math.min(buf.n * 2, 64) or 1
            buf = {rows = redis.call('ZPOPMIN', wk, n), at = 1, n = n}
            popped[wk] = buf
          end
          if buf.at > #buf.rows then
            empty = true
          else
            any = true
            c = {tonumber(buf.rows[buf.at + 1]), buf.rows[buf.at], q, t, wk}
            c[9] = buf
          end
        else
          local head = redis.call('ZRANGE', wk, 0, 0, 'WITHSCORES')
          if #head == 0 then
            empty = true
          else
            any = true
            c = {tonumber(head[2]), head[1], q, t, wk}
          end
        end
      end
      if empty then
        table.remove(tasks, i)
        changed = true
      else
        i = i + 1
        if c and (not best or c[1] < best[1] or (c[1] == best[1] and c[2] < best[2])) then
          best = c
        end
      end
    end
    if changed then
      if #tasks > 0 then
        redis.call('HSET', ftkkey(q), tc, table.concat(tasks, '\0'))
      else
        redis.call('HDEL', ftkkey(q), tc)
      end
    end
    return best, any
  end

  -- The popped jobs the claim did not take go back where they were.
  local function put_back_popped()
    for wk, buf in pairs(popped) do
      local back = {}
      for i = buf.at, #buf.rows, 2 do
        back[#back + 1] = buf.rows[i + 1]
        back[#back + 1] = buf.rows[i]
      end
      call_many('ZADD', wk, back)
    end
  end

  local function fair_stream(q, vtime, weighted)
    local v = tonumber(vtime) or 0
    return {q = q, fq = fqkey(q), v = v, v0 = v, head = nil, cur = nil, seen = {}, live = {},
      page = {}, at = 1, read = 0, ended = false, nw = tonumber(weighted) or 0, weights = {}}
  end

  -- The first unexamined tenant of fq, as {tc, pass, tasks}, or nil.
  local function unexamined(st)
    if st.at > #st.page and not st.ended then
      local size = math.min(64, limit + 1)
      local rows = redis.call('ZRANGE', st.fq, st.read, st.read + size - 1, 'WITHSCORES')
      st.read = st.read + size
      st.ended = #rows < 2 * size
      st.page = {}
      st.at = 1
      if #rows > 0 then
        local codes = {}
        for i = 1, #rows, 2 do codes[#codes + 1] = rows[i] end
        local joined = redis.call('HMGET', ftkkey(st.q), unpack(codes))
        for i, tc in ipairs(codes) do
          st.page[i] = {tc, tonumber(rows[2 * i]), split_tasks(joined[i])}
        end
      end
    end
    return st.page[st.at]
  end

  local function before(a_pass, a_tc, b_pass, b_tc)
    return a_pass < b_pass or (a_pass == b_pass and a_tc < b_tc)
  end

  -- The examined tenants still claimable, a binary heap by (pass, tenant code).
  local function heap_push(h, e)
    local i = #h + 1
    h[i] = e
    while i > 1 do
      local up = math.floor(i / 2)
      if not before(h[i].pass, h[i].tc, h[up].pass, h[up].tc) then break end
      h[i], h[up] = h[up], h[i]
      i = up
    end
  end

  local function heap_pop(h)
    local top = h[1]
    local last = table.remove(h)
    if #h == 0 then return top end
    h[1] = last
    local i = 1
    while true do
      local l, r, m = 2 * i, 2 * i + 1, i
      if l <= #h and before(h[l].pass, h[l].tc, h[m].pass, h[m].tc) then m = l end
      if r <= #h and before(h[r].pass, h[r].tc, h[m].pass, h[m].tc) then m = r end
      if m == i then return top end
      h[i], h[m] = h[m], h[i]
      i = m
    end
  end

  -- The stream's next job by the rule (kept as its head until taken), or nil.
  local function fair_peek(st)
    local c = st.head
    if c then
      local t = c[4]
      if budgets[t] > 0 and (not c[6] or held[c[6]] < keycaps[t])
          and (not c[10] or rheld[c[10]] < keyrates[t][1]) then
        return c
      end
      st.head = nil  -- its task's budget, group or rate window taken by another queue's job
    end
    while true do
      -- st.cur: the tenant whose turn it is (out of the heap until it is taken)
      local best = st.cur
      if not best then
        local top = st.live[1]
        local u = unexamined(st)
        if u and (not top or before(u[2], u[1], top.pass, top.tc)) then
          best = {tc = u[1], pass = u[2], tasks = u[3], state = 'live'}
          st.seen[#st.seen + 1] = best
          st.at = st.at + 1
        elseif top then
          best = heap_pop(st.live)
        else
          return nil
        end
        st.cur = best
      end
      local head, any = tenant_head(st, best)
      if head then
        head[7] = best
        head[8] = math.max(best.pass, st.v)  -- effective pass
        st.head = head
        return head
      end
      best.state = any and 'blocked' or 'gone'
      st.cur = nil
    end
  end

  -- The claim takes `c`, the stream's head: pass = effective + 1 / weight,
  -- vtime = effective.
  local function fair_take(st, c)
    local e = c[7]
    local w = 1
    if st.nw > 256 then  -- many weights: read one tenant at a time
      w = st.weights[e.tc]
      if not w then
        w = tonumber(redis.call('HGET', qwkey(st.q), e.tc)) or 1
        st.weights[e.tc] = w
      end
    elseif st.nw > 0 then  -- a few: read at once
      if not st.loaded then
        local rows = redis.call('HGETALL', qwkey(st.q))
        for i = 1, #rows, 2 do st.weights[rows[i]] = tonumber(rows[i + 1]) end
        st.loaded = true
      end
      w = st.weights[e.tc] or 1
    end
    e.pass = c[8] + 1 / w
    e.moved = true
    heap_push(st.live, e)
    st.cur = nil
    st.v = c[8]
    st.head = nil
    if c[9] then c[9].at = c[9].at + 2 else redis.call('ZREM', c[5], c[2]) end
  end

  -- The claim's changes to a stream's tenants: new passes, the skipped ones
  -- vtime overtook lifted to it (their effective pass, so fq's order stays the
  -- rule's), the drained ones out of fq (a pass above vtime kept in fs:).
  local function fair_write(st)
    st.head = nil
    local fs = fskey(st.q)
    if st.v ~= st.v0 then redis.call('HSET', qckey(st.q), 'fv', fmt(st.v)) end
    local moves, parked, gone = {}, {}, {}
    for _, e in ipairs(st.seen) do
      if e.state == 'gone' then
        gone[#gone + 1] = e.tc
        if e.pass > st.v then
          parked[#parked + 1] = e.tc
          parked[#parked + 1] = fmt(e.pass)
        end
      elseif e.moved or e.pass < st.v then
        moves[#moves + 1] = fmt(math.max(e.pass, st.v))
        moves[#moves + 1] = e.tc
      end
    end
    call_many('ZADD', st.fq, moves)
    call_many('ZREM', st.fq, gone)
    call_many('HDEL', ftkkey(st.q), gone)
    call_many('HSET', fs, parked)
  end

  -- 4. candidates: the heads of each (queue, task) set the claim may take from
  -- (fair queues: a stream each)
  local cands = {}
  local streams = {}
  local sources = 0
  local seen_q = {}
  for _, q in ipairs(queues) do
    local conf = nil
    if not seen_q[q] then
      seen_q[q] = true
      conf = redis.call('HMGET', qckey(q), 'paused', 'fair', 'fv', 'nw')
      FAIR[q] = conf[2] == 'tenant'
    end
    if conf and conf[1] == '1' then
      -- paused
    elseif conf and FAIR[q] then
      streams[#streams + 1] = fair_stream(q, conf[3], conf[4])
    elseif conf then
      for _, t in ipairs(redis.call('SMEMBERS', wtkey(q))) do
        local b = budget_of(t)
        if b > 0 then
          local wk = wkey(q, t)
          local cap = keycaps[t]
          local krate = keyrates[t]
          if cap or krate then
            local found = free_heads(wk, t, cap, krate, math.min(b, limit))
            if not found then
              redis.call('SREM', wtkey(q), t)
            elseif #found > 0 then
              sources = sources + 1
              for _, f in ipairs(found) do
                local c = {f[1], f[2], q, t, wk, f[3]}
                c[10] = f[4]
                cands[#cands + 1] = c
              end
            end
          else
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
  end
  if sources > 1 then
    table.sort(cands, function(x, y)
      if x[1] ~= y[1] then return x[1] < y[1] end
      return x[2] < y[2]
    end)
  end

  -- 5. claim in that order within each task's budget and its groups' free
  -- slots (a candidate of a capped task may find its group filled by one of
  -- another queue's, taken first); a fair queue's stream merges in by its
  -- head job's place in that order
  local payload_keys = {}
  local act = {}
  local ttl_ids = {}  -- claimed jobs with a TTL: they leave the expiring index
  local slots = {}
  local ci = 1
  while #claimed < limit do
    local c = nil
    while ci <= #cands do
      local x = cands[ci]
      local k = x[6]
      local rk = x[10]
      if budgets[x[4]] > 0 and (not k or held[k] < keycaps[x[4]])
          and (not rk or rheld[rk] < keyrates[x[4]][1]) then
        c = x
        break
      end
      ci = ci + 1
    end
    local from = nil
    for _, st in ipairs(streams) do
      local h = fair_peek(st)
      if h and (not c or h[1] < c[1] or (h[1] == c[1] and h[2] < c[2])) then
        c = h
        from = st
      end
    end
    if not c then break end
    local member = c[2]
    if from then
      fair_take(from, c)
    else
      ci = ci + 1
      local r = removed[c[5]]
      if not r then r = {}; removed[c[5]] = r end
      r[#r + 1] = member
    end
    local t = c[4]
    local k = c[6]
    local rk = c[10]
    do
      budgets[t] = budgets[t] - 1
      if k then held[k] = held[k] + 1 end
      if rk then rheld[rk] = rheld[rk] + 1 end
      local id = string.sub(member, 18)
      local key = jkey(id)
      -- Read the row once, then write the changes and patch the copy we return.
      local row = redis.call('HGETALL', key)
      local attempts = 1
      local ck = nil
      for i = 1, #row, 2 do
        local name = row[i]
        if name == 'ck' then
          ck = row[i + 1]
        elseif name == 'a' then
          attempts = tonumber(row[i + 1]) + 1
          row[i + 1] = attempts
        elseif name == 's' then
          row[i + 1] = 'active'
        elseif name == 'ex' then
          ttl_ids[#ttl_ids + 1] = id
        end
      end
      redis.call('HSET', key, 'a', attempts, 's', 'active', 'lu', lutext, 'lt', token, 'w', worker,
        'sa', nowtext)
      row[#row + 1] = 'id'
      row[#row + 1] = id
      payload_keys[#payload_keys + 1] = pkey(id)
      act[#act + 1] = lease_until
      act[#act + 1] = id
      note_slot(slots, t, ck, id)
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
      if rk then  -- its (task, rate_limit_key) window, listed in its task's index
        redis.call('ZADD', rk, now, id .. ':' .. token)
        redis.call('PEXPIRE', rk, math.ceil(keyrates[t][2] * 1000) + 1000)
        note_window(now, t, rk, keyrates[t][2], indexed)
      end
      claimed[#claimed + 1] = row
    end
  end
  for first = 1, #payload_keys, 4000 do
    local last = math.min(first + 3999, #payload_keys)
    local payloads = redis.call('MGET', unpack(payload_keys, first, last))
    for i = first, last do
      local payload = payloads[i - first + 1]
      if payload then
        local row = claimed[i]
        row[#row + 1] = 'p'
        row[#row + 1] = payload
      end
    end
  end
  for wk, members in pairs(removed) do call_many('ZREM', wk, members) end
  put_back_popped()
  for _, st in ipairs(streams) do fair_write(st) end
  call_many('ZREM', K_EXPIRING, ttl_ids)
  add_active(K_ACTIVE, act)
  move_slots('SADD', slots)
  return group, expired
end

-- An idle worker: its claim request, stored so that an enqueue can claim for it
-- (claim_for) and push the rows to its inbox. Registered for `ttl` seconds by a
-- claim that came back short; each claim replaces it; a worker that died stops
-- being offered work when the registration runs out.
local function unregister_idle(worker)
  local key = iwkey(worker)
  local queues = redis.call('HGET', key, 'queues')
  if not queues then return end
  for _, q in ipairs(cjson.decode(queues)) do redis.call('ZREM', idlekey(q), worker) end
  redis.call('DEL', key)
end

local function register_idle(now, worker, free, lease, token, circuits_on, queues, ttl)
  local circuits = '0'
  if circuits_on then circuits = '1' end
  local key = iwkey(worker)
  redis.call('HSET', key, 'free', free, 'lease', fmt(lease), 'token', token,
    'circuits', circuits, 'queues', cjson.encode(queues))
  local ms = math.ceil(ttl * 1000)
  redis.call('PEXPIRE', key, ms)
  for _, q in ipairs(queues) do
    local idle = idlekey(q)
    redis.call('ZADD', idle, now + ttl, worker)
    -- Gone with its last registration: a worker's own queue is rarely
    -- enqueued to, which is what drops expired members otherwise.
    if redis.call('PTTL', idle) < ms then redis.call('PEXPIRE', idle, ms) end
  end
end

-- Hand new work of queue `q` to its idle workers, until none is left or every
-- live registration is used. Returns true when waiting jobs of `q` remain in
-- `wks` (the queue's (queue, task) sets the caller filled).
local function hand_off(now, q, wks, counts)
  local idle = idlekey(q)
  redis.call('ZREMRANGEBYSCORE', idle, '-inf', '(' .. fmt(now))
  local function left()
    for _, wk in ipairs(wks) do
      if redis.call('ZCARD', wk) > 0 then return true end
    end
    return false
  end
  for _, worker in ipairs(redis.call('ZRANGE', idle, 0, 15)) do
    if not left() then return false end
    local key = iwkey(worker)
    local r = redis.call('HMGET', key, 'free', 'lease', 'token', 'circuits', 'queues')
    if not r[1] then
      redis.call('ZREM', idle, worker)
    else
      local free = tonumber(r[1])
      local n = redis.call('HINCRBY', key, 'n', 1)
      local group, expired = claim_for(now, worker, free, tonumber(r[2]), r[3] .. '.' .. n,
        r[4] == '1', cjson.decode(r[5]), {}, {}, {}, {}, counts)
      local claimed = group[5]
      if #claimed > 0 or #expired > 0 then
        local inbox = inboxkey(worker)
        redis.call('RPUSH', inbox, cmsgpack.pack({fmt(now), {group}, expired}))
        -- Leftovers of a worker that died go with its leases (the jobs come
        -- back by stall recovery; the worker would not start them any more).
        redis.call('PEXPIRE', inbox, math.ceil(tonumber(r[2]) * 1000))
      end
      if #claimed >= free then unregister_idle(worker)
      else redis.call('HSET', key, 'free', free - #claimed) end
    end
  end
  return left()
end

-- Take up to `limit` of the jobs handed to `worker` that it has not popped yet:
-- rows still active under the handoff's lease get a lease from `now` (as if
-- claimed now); any beyond `limit` go back to the inbox, still the worker's.
-- Returns their lease groups, the expired rows, and how many jobs were taken.
local function take_inbox(now, worker, lease, limit)
  local inbox = inboxkey(worker)
  local items = redis.call('LRANGE', inbox, 0, -1)
  local groups, rest, expired = {}, {}, {}
  local taken = 0
  if #items == 0 then return groups, expired, taken end
  redis.call('DEL', inbox)
  local lutext = fmt(now + lease)
  local act = {}
  for _, packed in ipairs(items) do
    if packed ~= '' then
      local item = cmsgpack.unpack(packed)
      for _, handed in ipairs(item[2]) do
        -- Not a lease group (another build's format): skipped; its jobs come
        -- back by stall recovery.
        if type(handed) ~= 'table' or type(handed[5]) ~= 'table' then break end
        local token = handed[2]
        local kept, left = {}, {}
        for _, row in ipairs(handed[5]) do
          local id
          for i = 1, #row, 2 do
            if row[i] == 'id' then id = row[i + 1]; break end
          end
          local f = redis.call('HMGET', jkey(id), 's', 'lt')
          if f[1] == 'active' and f[2] == token then
            redis.call('HSET', jkey(id), 'lu', lutext)
            act[#act + 1] = now + lease
            act[#act + 1] = id
            if taken < limit then
              taken = taken + 1
              kept[#kept + 1] = row
            else
              left[#left + 1] = row
            end
          end
        end
        if #kept > 0 then
          groups[#groups + 1] = lease_group(lutext, token, handed[3], handed[4], kept)
        end
        if #left > 0 then
          rest[#rest + 1] = lease_group(lutext, token, handed[3], handed[4], left)
        end
      end
      for _, row in ipairs(item[3]) do expired[#expired + 1] = row end
    end
  end
  add_active(K_ACTIVE, act)
  if #rest > 0 then
    redis.call('LPUSH', inbox, cmsgpack.pack({fmt(now), rest, {}}))
    redis.call('PEXPIRE', inbox, math.ceil(lease * 1000))
  end
  return groups, expired, taken
end
