-- prune-1: apply retention rules to terminal jobs (prune_jobs). Idempotency
-- keys and rate-limit logs expire by themselves (PEXPIRE).
-- KEYS[1] all         lex index of every job id
-- ARGV[1] key prefix; ARGV[2] most jobs deleted per rule in one call;
-- ARGV[3] number of rules; then per rule: state, max_age|'', max_count|'',
--   task|'', number of excluded tasks k, then k task names
-- Returns how many jobs were deleted.
local now = now_time()
local cap = tonumber(ARGV[2])
local nrules = tonumber(ARGV[3])
local pos = 4
local counts = {}
local deleted = 0
for _ = 1, nrules do
  local state, max_age, max_count, task = ARGV[pos], tonumber(ARGV[pos + 1]),
    tonumber(ARGV[pos + 2]), ARGV[pos + 3]
  local k = tonumber(ARGV[pos + 4])
  local excluded = {}
  for j = 1, k do excluded[ARGV[pos + 4 + j]] = true end
  pos = pos + 5 + k
  if TERMINAL[state] then
    local index = donekey(state)
    local doomed = {}
    if task == '' and k == 0 then
      if max_age then
        for _, id in ipairs(redis.call('ZRANGEBYSCORE', index, '-inf', '(' .. fmt(now - max_age),
            'LIMIT', 0, cap)) do
          doomed[id] = true
        end
      end
      if max_count then
        local extra = redis.call('ZCARD', index) - math.max(0, max_count)
        if extra > 0 then
          for _, id in ipairs(redis.call('ZRANGE', index, 0, math.min(extra, cap) - 1)) do
            doomed[id] = true
          end
        end
      end
    else
      -- Oldest first, so the rows kept by max_count are the newest. An age-only
      -- rule reads only the rows old enough; a count needs the task's whole set.
      local rows
      if max_count then
        rows = redis.call('ZRANGE', index, 0, -1, 'WITHSCORES')
      elseif not max_age then
        rows = {}
      else
        rows = redis.call('ZRANGEBYSCORE', index, '-inf', '(' .. fmt(now - max_age),
          'WITHSCORES', 'LIMIT', 0, cap * 4)
      end
      local mine = {}
      for i = 1, #rows, 2 do
        local t = redis.call('HGET', jkey(rows[i]), 't')
        if t and ((task ~= '' and t == task) or (task == '' and not excluded[t])) then
          mine[#mine + 1] = {rows[i], tonumber(rows[i + 1])}
        end
      end
      local cutoff = max_age and now - max_age
      local extra = max_count and (#mine - math.max(0, max_count)) or 0
      for i, row in ipairs(mine) do
        if i <= extra or (cutoff and row[2] < cutoff) then doomed[row[1]] = true end
      end
    end
    local n = 0
    for id, _ in pairs(doomed) do
      if n >= cap then break end
      if remove_job(id, counts) then
        deleted = deleted + 1
        n = n + 1
      end
    end
  end
end
flush(counts)
return deleted
