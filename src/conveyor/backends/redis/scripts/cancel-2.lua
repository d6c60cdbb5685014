-- cancel-2: blocked/waiting/delayed -> cancelled now; active -> flagged;
-- terminal -> unchanged (cancel_job).
-- KEYS[1] delayed     delayed jobs by run_at
-- KEYS[2] expiring    waiting jobs with a TTL
-- ARGV[1] key prefix; ARGV[2] job id
-- A cancelled job that has dependents (flag dn) resolves them here
-- (resolve_dependents, lib.lua: their hashes, dep:<id>, blocked, delayed,
-- w:/wt:, done:cancelled, n:<queue>, and wake-ups for those released); a
-- cancelled blocked job leaves the blocked index.
-- Returns the job {field, value...} after the change, or an empty list.
local id = ARGV[2]
local key = jkey(id)
local f = redis.call('HMGET', key, 's', 'q', 't', 'pr', 'ra', 'dn', 'tn')
if not f[1] then return {} end
local counts = {}
if f[1] == 'waiting' or f[1] == 'delayed' or f[1] == 'blocked' then
  local now = now_time()
  unindex(id, f[1], f[2], f[3], f[7], f[4], f[5])
  redis.call('HSET', key, 's', 'cancelled', 'fa', fmt(now))
  redis.call('ZADD', donekey('cancelled'), now, id)
  bump(counts, f[2], f[1], 'cancelled')
  if f[6] == '1' then
    local woken = {}
    publish_released(woken, resolve_dependents({id}, now, counts, woken))
  end
  flush(counts)
elseif f[1] == 'active' then
  redis.call('HSET', key, 'cr', '1')
end
return job_row(id)
