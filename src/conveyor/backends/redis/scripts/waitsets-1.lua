-- waitsets-1: the waiting sets of the tasks ARGV[2..] in every queue, the plain
-- per-task sets (w:) and a fair queue's per-tenant ones (fw:), as
-- {set, task, ...}; key_counts reads their members in slices.
-- KEYS[1] queues
local wanted = {}
for i = 2, #ARGV do wanted[ARGV[i]] = true end
local out = {}
for _, q in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  for _, s in ipairs(waiting_sets(q)) do
    if wanted[s[2]] then
      out[#out + 1] = s[1]
      out[#out + 1] = s[2]
    end
  end
end
return out
