-- recover-3: active jobs whose lease expired go back to waiting, or end failed
-- (stalled) or cancelled (recover_stalled).
-- KEYS[1] active      active jobs by lease_until
-- KEYS[2] expiring    waiting jobs with a TTL
-- KEYS[3] wake        (channel) wake-up notifications
-- ARGV[1] key prefix; ARGV[2] max stalls
-- A job that ends failed or cancelled and has dependents (flag dn) resolves
-- them here (resolve_dependents, lib.lua: their hashes, dep:<id>, blocked,
-- delayed, w:/wt: or fw:/ftk:/fq:, done:cancelled, n:<queue>, and wake-ups for those released).
-- Each recovered job gives back its (task, concurrency_key) slot (ka: sets).
-- Returns {requeued jobs}, {failed jobs}, {cancelled jobs}, each job {field, value...}.
local now = now_time()
local nowtext = fmt(now)
local max_stalled = tonumber(ARGV[2])
local requeued, failed, cancelled = {}, {}, {}
local counts = {}
local woken = {}
local finished = {}  -- jobs made terminal that have dependents
local slots = {}  -- the slots given back, per group
local stalled = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. fmt(now), 'LIMIT', 0, 1000)
for _, id in ipairs(stalled) do
  local key = jkey(id)
  local f = redis.call('HMGET', key, 'cr', 'a', 'ma', 'st', 'q', 't', 'pr', 'ra', 'ttl', 's', 'dn',
    'ck', 'tn')
  if f[10] == 'active' then
    note_slot(slots, f[6], f[12], id)
    local attempts = tonumber(f[2]) or 0
    local stalls = (tonumber(f[4]) or 0) + 1
    append_error(key, json_error('Stalled',
      "the job's lease expired: its worker died or stopped renewing", attempts, 'stalled', now))
    redis.call('HDEL', key, 'lu', 'lt')
    redis.call('HSET', key, 'st', stalls)
    local q = f[5]
    if f[1] == '1' then
      redis.call('HSET', key, 's', 'cancelled', 'fa', nowtext)
      redis.call('ZADD', donekey('cancelled'), now, id)
      bump(counts, q, 'active', 'cancelled')
      cancelled[#cancelled + 1] = job_row(id)
      if f[11] == '1' then finished[#finished + 1] = id end
    elseif attempts >= tonumber(f[3]) or stalls > max_stalled then
      redis.call('HSET', key, 's', 'failed', 'fr', 'stalled', 'fa', nowtext)
      redis.call('ZADD', donekey('failed'), now, id)
      bump(counts, q, 'active', 'failed')
      failed[#failed + 1] = job_row(id)
      if f[11] == '1' then finished[#finished + 1] = id end
    else
      local ex = nil
      local ttl = tonumber(f[9])
      redis.call('HSET', key, 's', 'waiting')
      if ttl then
        ex = now + ttl
        redis.call('HSET', key, 'ex', fmt(ex))
      end
      redis.call('HDEL', key, 'w')
      enter_waiting(id, q, f[6], f[13], f[7], f[8], ex)
      bump(counts, q, 'active', 'waiting')
      woken[q] = true
      requeued[#requeued + 1] = job_row(id)
    end
  end
end
call_many('ZREM', KEYS[1], stalled)
move_slots('SREM', slots)
local timer = false
if #finished > 0 then timer = resolve_dependents(finished, now, counts, woken) end
flush(counts)
for q, _ in pairs(woken) do redis.call('PUBLISH', KEYS[3], 'q:' .. q) end
if timer then redis.call('PUBLISH', KEYS[3], 't:') end
return {requeued, failed, cancelled}
