-- retry-3: copy a failed job into a new waiting job (retry_failed).
-- KEYS[1] all         lex index of every job id
-- KEYS[2] expiring    waiting jobs with a TTL
-- KEYS[3] wake        (channel) wake-up notifications
-- ARGV[1] key prefix; ARGV[2] failed job id; ARGV[3] new job id
-- Once per dead letter: a job already retried (field rs) creates nothing.
-- Returns {'ok', {field, value...}} of the new job, {'earlier', rs, {field,
-- value...}} of the job it was retried as before (an empty row when that job is
-- gone), or {'missing'}, {'state', state} or {'exists'}.
local id, new_id = ARGV[2], ARGV[3]
local key = jkey(id)
local f = redis.call('HMGET', key, 's', 't', 'q', 'p', 'pr', 'ma', 'to', 'ttl', 'tn', 'm', 'rs')
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
local names = {[5] = 'pr', [7] = 'to', [9] = 'tn', [10] = 'm'}
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
enter_waiting(new_id, f[3], f[2], f[5], now, ex)
redis.call('HSET', key, 'rs', new_id)
local counts = {}
bump(counts, f[3], nil, 'waiting')
flush(counts)
redis.call('PUBLISH', KEYS[3], 'q:' .. f[3])
return {'ok', job_row(new_id)}
