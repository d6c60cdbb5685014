-- tenants-2: waiting (waiting and delayed) and active jobs per tenant of one
-- queue (tenant_counts).
-- KEYS[1] delayed     delayed jobs by run_at
-- KEYS[2] active      active jobs by lease_until
-- ARGV[1] key prefix; ARGV[2] queue
-- A fair queue's waiting jobs are counted from its per-tenant sets (one ZCARD
-- per (tenant, task)); a plain queue's are read job by job, as are the delayed
-- and active jobs of every queue (a read for surfaces, not for the claim path).
-- Returns {tenant code, waiting, active...} (tenant code: '0' None, '1' .. name).
local q = ARGV[2]
local waiting, active = {}, {}
local seen = {}
local order = {}
local function add(into, tc, n)
  if not seen[tc] then
    seen[tc] = true
    order[#order + 1] = tc
  end
  into[tc] = (into[tc] or 0) + n
end
if is_fair(q) then
  for _, s in ipairs(waiting_sets(q)) do
    local n = redis.call('ZCARD', s[1])
    if n > 0 then add(waiting, s[3], n) end
  end
else
  for _, s in ipairs(waiting_sets(q)) do
    for _, m in ipairs(redis.call('ZRANGE', s[1], 0, -1)) do
      add(waiting, tcode(redis.call('HGET', jkey(string.sub(m, 18)), 'tn')), 1)
    end
  end
end
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local f = redis.call('HMGET', jkey(id), 'q', 'tn', 's')
  if f[1] == q and f[3] == 'delayed' then add(waiting, tcode(f[2]), 1) end
end
for _, id in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
  local f = redis.call('HMGET', jkey(id), 'q', 'tn', 's')
  if f[1] == q and f[3] == 'active' then add(active, tcode(f[2]), 1) end
end
local out = {}
for _, tc in ipairs(order) do
  out[#out + 1] = tc
  out[#out + 1] = waiting[tc] or 0
  out[#out + 1] = active[tc] or 0
end
return out
