-- retry-3: copy a failed job into a new waiting job (retry_failed).
-- KEYS[1] all         lex index of every job id
-- KEYS[2] expiring    waiting jobs with a TTL
-- KEYS[3] wake        (channel) wake-up notifications
-- ARGV[1] key prefix; ARGV[2] failed job id; ARGV[3] new job id
-- Once per dead letter: a job already retried (field rs) creates nothing.
-- The copy keeps its concurrency key (ck), its rate limit key (rk) and the job's place in a workflow
-- (dp, of, wf), and the jobs
-- cancelled 'dependency_failed' downstream of it (found through the dependents
-- sets failed and cancelled jobs keep) go back to blocked, waiting on the
-- copy; as conveyor/backends/resume.py chooses, one that also waits on another
-- failed job stays cancelled.
-- Returns {'ok', {field, value...}} of the new job, {'earlier', rs, {field,
-- value...}} of the job it was retried as before (an empty row when that job is
-- gone), or {'missing'}, {'state', state} or {'exists'}.
local id, new_id = ARGV[2], ARGV[3]
local key = jkey(id)
local f = redis.call('HMGET', key, 's', 't', 'q', 'p', 'pr', 'ma', 'to', 'ttl', 'tn', 'm', 'rs',
  'dp', 'of', 'wf', 'ck', 'rk')
if not f[1] then return {'missing'} end
if f[1] ~= 'failed' then return {'state', f[1]} end
if f[11] then return {'earlier', f[11], job_row(f[11])} end
f[4] = redis.call('GET', pkey(id))
local new_key = jkey(new_id)
if redis.call('EXISTS', new_key) == 1 then return {'exists'} end
local now = now_time()
local nowtext = fmt(now)
if f[4] then redis.call('SET', pkey(new_id), f[4]) end
local fields = {'t', f[2], 'q', f[3], 's', 'waiting', 'ra', nowtext, 'ca', nowtext,
  'a', 0, 'ma', f[6], 'ro', id}
local names = {[5] = 'pr', [7] = 'to', [9] = 'tn', [10] = 'm', [12] = 'dp', [13] = 'of',
  [14] = 'wf', [15] = 'ck', [16] = 'rk'}
for i, name in pairs(names) do
  if f[i] then fields[#fields + 1] = name; fields[#fields + 1] = f[i] end
end
local ex = nil
if f[8] then
  ex = now + tonumber(f[8])
  fields[#fields + 1] = 'ttl'; fields[#fields + 1] = f[8]
  fields[#fields + 1] = 'ex'; fields[#fields + 1] = fmt(ex)
end
redis.call('HSET', new_key, unpack(fields))
redis.call('ZADD', KEYS[1], 0, new_id)
-- Into the workflow's index only when it has one: a workflow stored before the
-- index existed stays without (its readers scan), never with a partial index.
if f[14] and redis.call('EXISTS', wfkey(f[14])) == 1 then
  redis.call('ZADD', wfkey(f[14]), 0, new_id)
end
enter_waiting(new_id, f[3], f[2], f[9], f[5], now, ex)
redis.call('HSET', key, 'rs', new_id)
local counts = {}
bump(counts, f[3], nil, 'waiting')

-- The cancelled dependents, level by level: id -> its depends_on.
local found, order = {}, {}
local level = {id}
while #level > 0 do
  local next_level = {}
  for _, parent in ipairs(level) do
    for _, d in ipairs(redis.call('SMEMBERS', depkey(parent))) do
      if not found[d] then
        local g = redis.call('HMGET', jkey(d), 's', 'fr', 'dp')
        if g[1] == 'cancelled' and g[2] == 'dependency_failed' and g[3] then
          local deps = cjson.decode(g[3])
          local names_parent = false
          for _, x in ipairs(deps) do
            if x == parent then names_parent = true end
          end
          if names_parent then
            found[d] = deps
            order[#order + 1] = d
            next_level[#next_level + 1] = d
          end
        end
      end
    end
  end
  level = next_level
end

-- Which resume: each of its dependencies is the original, a resumed job, or
-- did not fail (a missing job is gone: finished).
local failed = {}
for _, d in ipairs(order) do
  for _, x in ipairs(found[d]) do
    if failed[x] == nil then
      local s = redis.call('HGET', jkey(x), 's')
      failed[x] = s == 'failed' or s == 'cancelled'
    end
  end
end
local resumed = {[id] = true}
local resumed_order = {}
local progress = true
while progress do
  progress = false
  for _, d in ipairs(order) do
    if not resumed[d] then
      local ok = true
      for _, x in ipairs(found[d]) do
        if failed[x] and not resumed[x] then ok = false end
      end
      if ok then
        resumed[d] = true
        resumed_order[#resumed_order + 1] = d
        progress = true
      end
    end
  end
end

-- Resume them, dependencies first: blocked on the copy instead of the
-- original, and on each dependency not finished (a resumed one included).
for _, d in ipairs(resumed_order) do
  local deps = found[d]
  local pending, counted = 0, {}
  for i, x in ipairs(deps) do
    if x == id then deps[i] = new_id; x = new_id end
    if not counted[x] then
      counted[x] = true
      local s = redis.call('HGET', jkey(x), 's')
      if s and not TERMINAL[s] then
        pending = pending + 1
        redis.call('SADD', depkey(x), d)
        redis.call('HSET', jkey(x), 'dn', '1')
      end
    end
  end
  local dkey = jkey(d)
  redis.call('HDEL', dkey, 'fr', 'fa')
  redis.call('HSET', dkey, 's', 'blocked', 'dp', cjson.encode(deps), 'pd', pending)
  redis.call('ZREM', donekey('cancelled'), d)
  redis.call('ZADD', K_BLOCKED, 0, d)
  bump(counts, redis.call('HGET', dkey, 'q'), 'cancelled', 'blocked')
end
flush(counts)
redis.call('PUBLISH', KEYS[3], 'q:' .. f[3])
return {'ok', job_row(new_id)}
