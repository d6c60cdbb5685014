-- enqueue-5: insert a batch of jobs atomically, in order (enqueue_jobs).
-- KEYS[1] all        lex index of every job id
-- KEYS[2] delayed    delayed jobs by run_at
-- KEYS[3] expiring   waiting jobs with a TTL, by expires_at
-- KEYS[4] queues     every queue name seen
-- KEYS[5] wake       (channel) wake-up notifications
-- New waiting jobs go first to the queue's idle workers (direct handoff: claimed
-- for them, pushed to their inboxes); the queue's wake-up is published only
-- when some of them are still waiting.
-- ARGV[1] key prefix; ARGV[2] number of jobs n; then n groups of 7:
--   id, task, queue, payload, max_attempts, timeout|'', options
-- options: '' when every other option has its default (most jobs: fewer
--   arguments to pack and to convert), else a MessagePack array of priority,
--   delay, run_at|nil, ttl|nil, idempotency_key|nil, idempotency_ttl,
--   tenant|nil, metadata|nil, retry_of|nil, depends_on (list of ids)|nil,
--   on_dependency_failure ('run')|nil, workflow_id|nil, concurrency_key|nil,
--   debounce|nil, rate_limit_key|nil
-- Debounce (an idempotency key and a debounce): when the key's job is waiting
-- or delayed, it takes this entry's payload and metadata and is delayed until
-- now + debounce (postpone below; the key lives on); otherwise a new job is
-- stored, delayed until now + debounce, and the key points at it. A later
-- debounced entry of a key that an earlier entry of this batch stored gives
-- that new job its payload, metadata and debounce before it is written.
-- Dependencies: each id must be a stored job or a new one earlier in the batch.
-- A job whose dependencies all finished well (or at all, policy run) is
-- waiting/delayed as usual; one with a failed or cancelled dependency (policy
-- cancel) is stored cancelled 'dependency_failed' (done:cancelled); otherwise
-- it is blocked: index `blocked`, its id added to each unfinished dependency's
-- set dep:<id> and that job's flag dn=1 (see resolve_dependents in lib.lua).
-- Returns {'ok', now, item...}: item {'n', state, run_at, ttl|'', expires_at|''}
-- for a new job (just 'n' when it is waiting, due now, without a TTL), {'r',
-- {field, value...}} for a new job a later debounced entry changed, {'d',
-- {field, value...}} for a live duplicate (or a postponed job), {'g', id, task, queue, state|'',
-- key} for a duplicate whose job retention deleted; or {'full', queue,
-- max_size} / {'exists', id} / {'unknown', id, dependency id} with nothing
-- stored.
local now = now_time()
local n = tonumber(ARGV[2])
local F = 7
local DEFAULTS = {0, 0}  -- priority 0, no delay, nothing else set
local options = {}
local plan = {}
local in_batch = {}     -- idempotency key -> the id it points at, in this batch
local in_batch_at = {}  -- idempotency key -> the entry that stores it new
local later = {}        -- entry -> the last debounced entry of its key after it
local seen = {}
local added = {}
local qttl = {}
local fresh = {}

for i = 0, n - 1 do
  local b = 2 + i * F
  local id, q = ARGV[b + 1], ARGV[b + 3]
  local o = DEFAULTS
  if ARGV[b + 7] ~= '' then o = cmsgpack.unpack(ARGV[b + 7]) end
  options[i + 1] = o
  local ik = o[5]
  local debounce = o[14]
  local item = nil
  if ik then
    if in_batch[ik] then
      item = {'dup', in_batch[ik]}
      if debounce then
        local at = in_batch_at[ik]
        if at then later[at] = i + 1 else item = {'postpone', in_batch[ik], i + 1} end
      end
    else
      local known = redis.call('HMGET', idemkey(ik), 'id', 'task', 'queue', 'state')
      if known[1] then
        local s = redis.call('HGET', jkey(known[1]), 's')
        if debounce then
          -- Unstarted: postponed; started, finished or gone: a new job below.
          if s == 'waiting' or s == 'delayed' then
            item = {'postpone', known[1], i + 1}
            in_batch[ik] = known[1]
          end
        elseif s then
          item = {'dup', known[1]}
        else
          item = {'gone', known[1], known[2], known[3], known[4] or '', ik}
        end
      end
    end
  end
  if not item then
    if seen[id] then return {'exists', id} end
    if o[10] then
      for _, dep in ipairs(o[10]) do
        if not seen[dep] and redis.call('EXISTS', jkey(dep)) == 0 then
          return {'unknown', id, dep}
        end
      end
    end
    seen[id] = true
    fresh[#fresh + 1] = id
    item = b  -- a new job: where its arguments start
    added[q] = (added[q] or 0) + 1
    if ik then
      in_batch[ik] = id
      in_batch_at[ik] = i + 1
    end
  end
  plan[i + 1] = item
end

-- Ids already taken, in one read for the batch (every job is in `all`).
for first = 1, #fresh, 4000 do
  local last = math.min(first + 3999, #fresh)
  local scores = redis.call('ZMSCORE', K_ALL, unpack(fresh, first, last))
  for i = first, last do
    if scores[i - first + 1] then return {'exists', fresh[i]} end
  end
end

for q, count in pairs(added) do
  local conf = redis.call('HMGET', qckey(q), 'max_size', 'ttl', 'fair')
  qttl[q] = tonumber(conf[2])
  FAIR[q] = conf[3] == 'tenant'
  if conf[1] then
    local limit = tonumber(conf[1])
    local c = redis.call('HMGET', nkey(q), 'waiting', 'delayed')
    if (tonumber(c[1]) or 0) + (tonumber(c[2]) or 0) + count > limit then
      return {'full', q, conf[1]}
    end
  end
end

-- Where a new job with dependencies `deps` starts, `usual` being waiting or
-- delayed: cancelled when one failed or was cancelled (unless `runs_anyway`;
-- the failed ones are returned too), else blocked on the distinct ones not
-- finished yet (returned too), else `usual`. Jobs earlier in the batch are
-- written by then: one read each.
local function dependency_state(deps, runs_anyway, usual)
  local unfinished, counted = {}, {}
  local failed = {}
  for _, dep in ipairs(deps) do
    if not counted[dep] then
      counted[dep] = true
      local s = redis.call('HGET', jkey(dep), 's')
      if s == 'failed' or s == 'cancelled' then
        if not runs_anyway then failed[#failed + 1] = dep end
      elseif s and s ~= 'completed' then  -- a job gone since counts as completed
        unfinished[#unfinished + 1] = dep
      end
    end
  end
  if #failed > 0 then return 'cancelled', failed end
  if #unfinished > 0 then return 'blocked', unfinished end
  return usual, nil
end

-- The args of entry i start after ARGV[2 + (i - 1) * F].
local function args_at(i) return 2 + (i - 1) * F end

-- A debounced entry `i` found its key's unstarted job `id`: the job takes its
-- payload and metadata and waits delayed until now + debounce; its key lives
-- on for at least the entry's idempotency TTL from now. Returns true (a timer).
local function postpone(id, i, counts)
  local o = options[i]
  local key = jkey(id)
  local f = redis.call('HMGET', key, 's', 'q', 't', 'pr', 'ra', 'ttl', 'tn')
  if f[1] == 'waiting' then leave_waiting(id, f[2], f[3], f[7], f[4], f[5]) end
  local run_at = now + o[14]
  redis.call('HSET', key, 's', 'delayed', 'ra', fmt(run_at))
  if f[6] then redis.call('HSET', key, 'ex', fmt(run_at + tonumber(f[6]))) end
  if o[8] then redis.call('HSET', key, 'm', o[8]) else redis.call('HDEL', key, 'm') end
  redis.call('SET', pkey(id), ARGV[args_at(i) + 4])
  redis.call('ZADD', K_DELAYED, run_at, id)
  bump(counts, f[2], f[1], 'delayed')
  local ik = idemkey(o[5])
  local ms = math.max(1, math.floor(o[6] * 1000))
  if redis.call('PTTL', ik) < ms then redis.call('PEXPIRE', ik, ms) end
  return true
end

-- Validated: from here on nothing fails, so the batch is all or nothing.
local counts = {}
local all = {}
local timer = false
local expiring, delayed, payloads, dups = {}, {}, {}, {}
local blocked = {}      -- ZADD arguments of the blocked index
local waits = {}        -- queue -> task (fair: task NUL tenant) -> {set key, ZADD arguments}
local prefixes = {}     -- run_at text -> wmember's prefix (most jobs share one)
local out = {'ok', fmt(now)}
local nowtext = fmt(now)
local changed = {}  -- out index -> id of a new job a later entry changed
for i = 1, n do
  local item = plan[i]
  if type(item) == 'number' then
    local b = item
    local id, t, q = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3]
    local o = options[i]
    -- A later debounced entry of its key: that entry's payload, metadata, wait.
    local src = later[i] or i
    local so = options[src]
    local run_at
    local ratext
    if so[14] then
      run_at = now + so[14]
      ratext = fmt(run_at)
    elseif o[3] then
      run_at = o[3]
      ratext = fmt(run_at)
    elseif o[2] == 0 then
      run_at = now
      ratext = nowtext
    else
      run_at = now + o[2]
      ratext = fmt(run_at)
    end
    local ttl = o[4]
    if qttl[q] and (not ttl or qttl[q] < ttl) then ttl = qttl[q] end
    local state = 'waiting'
    if run_at > now then state = 'delayed' end
    local deps = o[10]
    local unfinished = nil
    if deps then state, unfinished = dependency_state(deps, o[11] == 'run', state) end
    payloads[#payloads + 1] = pkey(id)
    payloads[#payloads + 1] = ARGV[args_at(src) + 4]
    local fields = {'t', t, 'q', q, 's', state, 'ra', ratext,
      'ca', nowtext, 'a', 0}
    local n_ = #fields
    local pr = o[1]
    if pr ~= 0 then fields[n_ + 1] = 'pr'; fields[n_ + 2] = string.format('%d', pr); n_ = n_ + 2 end
    fields[n_ + 1] = 'ma'; fields[n_ + 2] = ARGV[b + 5]; n_ = n_ + 2
    if ARGV[b + 6] ~= '' then fields[n_ + 1] = 'to'; fields[n_ + 2] = ARGV[b + 6]; n_ = n_ + 2 end
    local ex = nil
    local ttltext, extext = '', ''
    if ttl then
      ex = run_at + ttl
      ttltext = fmt(ttl)
      extext = fmt(ex)
      fields[n_ + 1] = 'ttl'; fields[n_ + 2] = ttltext
      fields[n_ + 3] = 'ex'; fields[n_ + 4] = extext; n_ = n_ + 4
    end
    local ik = o[5]
    if ik then fields[n_ + 1] = 'ik'; fields[n_ + 2] = ik; n_ = n_ + 2 end
    if o[7] then fields[n_ + 1] = 'tn'; fields[n_ + 2] = o[7]; n_ = n_ + 2 end
    if so[8] then fields[n_ + 1] = 'm'; fields[n_ + 2] = so[8]; n_ = n_ + 2 end
    if o[9] then fields[n_ + 1] = 'ro'; fields[n_ + 2] = o[9]; n_ = n_ + 2 end
    if deps then
      fields[n_ + 1] = 'dp'; fields[n_ + 2] = cjson.encode(deps); n_ = n_ + 2
      if state == 'cancelled' then
        fields[n_ + 1] = 'fr'; fields[n_ + 2] = 'dependency_failed'
        fields[n_ + 3] = 'fa'; fields[n_ + 4] = nowtext; n_ = n_ + 4
      elseif state == 'blocked' then
        fields[n_ + 1] = 'pd'; fields[n_ + 2] = #unfinished; n_ = n_ + 2
      end
    end
    if o[11] then fields[n_ + 1] = 'of'; fields[n_ + 2] = o[11]; n_ = n_ + 2 end
    if o[12] then fields[n_ + 1] = 'wf'; fields[n_ + 2] = o[12]; n_ = n_ + 2 end
    if o[13] then fields[n_ + 1] = 'ck'; fields[n_ + 2] = o[13]; n_ = n_ + 2 end
    if o[15] then fields[n_ + 1] = 'rk'; fields[n_ + 2] = o[15]; n_ = n_ + 2 end
    redis.call('HSET', jkey(id), unpack(fields))
    if o[12] then redis.call('ZADD', wfkey(o[12]), 0, id) end
    all[#all + 1] = 0
    all[#all + 1] = id
    if state == 'waiting' then
      -- Batched per (queue, task): one ZADD for the whole run of jobs.
      local sets = waits[q]
      if not sets then sets = {}; waits[q] = sets end
      local lane = t
      if FAIR[q] then lane = t .. '\0' .. tcode(o[7]) end
      local w = sets[lane]
      if not w then
        w = {waiting_set(q, t, o[7]), {}}
        sets[lane] = w
        note_waiting(q, t, o[7])
      end
      local list = w[2]
      local prefix = prefixes[ratext]
      if not prefix then
        prefix = wmember(run_at, '')
        prefixes[ratext] = prefix
      end
      list[#list + 1] = -pr
      list[#list + 1] = prefix .. id
      if ex then
        expiring[#expiring + 1] = ex
        expiring[#expiring + 1] = id
      end
    elseif state == 'delayed' then
      delayed[#delayed + 1] = run_at
      delayed[#delayed + 1] = id
      timer = true
    elseif state == 'blocked' then
      blocked[#blocked + 1] = 0
      blocked[#blocked + 1] = id
      for _, dep in ipairs(unfinished) do
        redis.call('SADD', depkey(dep), id)
        redis.call('HSET', jkey(dep), 'dn', '1')
      end
    else
      redis.call('ZADD', donekey('cancelled'), now, id)
      -- Cancelled by failed dependencies: their dependents sets keep it, for a
      -- dead-letter retry of one of them to resume it (retry-3).
      for _, dep in ipairs(unfinished) do redis.call('SADD', depkey(dep), id) end
    end
    if ik then
      local key = idemkey(ik)
      redis.call('HSET', key, 'id', id, 'task', t, 'queue', q)
      -- A debounced job may take over a key whose job was pruned.
      if o[14] then redis.call('HDEL', key, 'state') end
      redis.call('PEXPIRE', key, math.max(1, math.floor(o[6] * 1000)))
    end
    bump(counts, q, nil, state)
    if later[i] then
      out[#out + 1] = false
      changed[#out] = id
    elseif ratext == nowtext and not ttl and state == 'waiting' then
      out[#out + 1] = 'n'  -- the common case: waiting, due now, no TTL
    else
      out[#out + 1] = {'n', state, ratext, ttltext, extext}
    end
  elseif item[1] == 'dup' then
    out[#out + 1] = false
    dups[#out] = item[2]  -- read once the batch is written (it may be in it)
  elseif item[1] == 'postpone' then
    timer = postpone(item[2], item[3], counts)
    out[#out + 1] = false
    dups[#out] = item[2]
  else
    out[#out + 1] = {'g', item[2], item[3], item[4], item[5], item[6]}
  end
end
for i = 1, #payloads, 4000 do
  redis.call('MSET', unpack(payloads, i, math.min(i + 3999, #payloads)))
end
call_many('ZADD', K_ALL, all)
for _, sets in pairs(waits) do
  for _, w in pairs(sets) do call_many('ZADD', w[1], w[2]) end
end
call_many('ZADD', K_EXPIRING, expiring)
call_many('ZADD', K_DELAYED, delayed)
call_many('ZADD', K_BLOCKED, blocked)
for q, _ in pairs(counts) do redis.call('SADD', K_QUEUES, q) end
-- Idle workers get the new work straight away, claimed for them (one hop less
-- than waking them to claim); the others are woken for what is left.
local still_waiting = {}
for q, sets in pairs(waits) do
  local keys = {}
  for _, w in pairs(sets) do keys[#keys + 1] = w[1] end
  still_waiting[q] = hand_off(now, q, keys, counts)
end
flush(counts)
for i, id in pairs(dups) do out[i] = {'d', job_row(id)} end
for i, id in pairs(changed) do out[i] = {'r', job_row(id)} end
for q, left in pairs(still_waiting) do
  if left then redis.call('PUBLISH', K_WAKE, 'q:' .. q) end
end
if timer then redis.call('PUBLISH', K_WAKE, 't:') end
return out
