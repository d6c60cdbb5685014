-- tenants-2: waiting jobs (state waiting) per tenant of one queue
-- (tenant_counts; reads.py adds the delayed and active ones, read in slices).
-- KEYS[1] delayed     (unused: the key count of the script's name)
-- KEYS[2] active      (unused)
-- ARGV[1] key prefix; ARGV[2] queue
-- A fair queue's waiting jobs are counted from its per-tenant sets (one ZCARD
-- per (tenant, task)); a plain queue's are read job by job.
-- Returns {tenant code, waiting, 0...} (tenant code: '0' None, '1' .. name).
local q = ARGV[2]
local waiting = {}
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
local out = {}
for _, tc in ipairs(order) do
  out[#out + 1] = tc
  out[#out + 1] = waiting[tc] or 0
  out[#out + 1] = 0
end
return out
