-- delete-workflows-1: delete whole workflows the retention found finished and
-- due, each only if that still holds for the jobs it saw: every one still
-- there and terminal, and a failed one retried since (rs) retried as one of
-- them (a copy made after the scan keeps its workflow alive).
-- KEYS[1] all         lex index of every job id (remove_job)
-- ARGV[1] key prefix; ARGV[2] number of workflows; then per workflow: its job
--   count n, then n job ids
-- Returns how many jobs were deleted.
local counts = {}
local deleted = 0
local pos = 3
for _ = 1, tonumber(ARGV[2]) do
  local n = tonumber(ARGV[pos])
  local mine = {}
  for j = 1, n do mine[ARGV[pos + j]] = true end
  local whole = true
  for j = 1, n do
    local f = redis.call('HMGET', jkey(ARGV[pos + j]), 's', 'rs')
    if not f[1] or not TERMINAL[f[1]] or (f[2] and not mine[f[2]]) then
      whole = false
      break
    end
  end
  if whole then
    for j = 1, n do
      if remove_job(ARGV[pos + j], counts) then deleted = deleted + 1 end
    end
  end
  pos = pos + n + 1
end
flush(counts)
return deleted
