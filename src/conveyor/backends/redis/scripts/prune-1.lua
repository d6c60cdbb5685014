-- prune-1: apply retention rules to terminal jobs (prune_jobs). Idempotency
-- keys and rate-limit logs expire by themselves (PEXPIRE).
-- KEYS[1] all         lex index of every job id
-- ARGV[1] key prefix; ARGV[2] most jobs deleted per rule in one call;
-- ARGV[3] number of rules; then per rule: state, max_age|'', max_count|'',
--   task|'', number of excluded tasks k, then k task names
-- Only plain jobs: a workflow's jobs (field wf) count among the newest, but are
-- left to delete-workflows-1 (the workflow goes whole or not at all).
-- Returns {how many jobs were deleted, 1 when a due workflow job was seen
-- (or not every due job was looked at), else 0}.
local now = now_time()
local cap = tonumber(ARGV[2])
local nrules = tonumber(ARGV[3])
local pos = 4
local counts = {}
local deleted = 0
local workflows = 0
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
    local n = 0
    if task == '' and k == 0 then
      -- The due jobs are the oldest `due` of the index (age and count alike):
      -- read them oldest first, past the workflow jobs skipped so far.
      local due = 0
      if max_age then
        due = redis.call('ZCOUNT', index, '-inf', '(' .. fmt(now - max_age))
      end
      if max_count then
        due = math.max(due, redis.call('ZCARD', index) - math.max(0, max_count))
      end
      local skipped = 0
      while skipped < due and n < cap and skipped < cap * 4 do
        local ids = redis.call('ZRANGE', index, skipped, math.min(due, skipped + cap - n) - 1)
        if #ids == 0 then break end
        for _, id in ipairs(ids) do
          if redis.call('HEXISTS', jkey(id), 'wf') == 1 then
            skipped = skipped + 1
            workflows = 1
          elseif remove_job(id, counts) then
            deleted = deleted + 1
            n = n + 1
            due = due - 1
          else
            skipped = skipped + 1
          end
        end
      end
      if skipped < due then workflows = 1 end
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
        local f = redis.call('HMGET', jkey(rows[i]), 't', 'wf')
        local t = f[1]
        if t and ((task ~= '' and t == task) or (task == '' and not excluded[t])) then
          mine[#mine + 1] = {rows[i], tonumber(rows[i + 1]), f[2]}
        end
      end
      local cutoff = max_age and now - max_age
      local extra = max_count and (#mine - math.max(0, max_count)) or 0
      if not max_count and #rows == cap * 8 then workflows = 1 end -- a full window
      for i, row in ipairs(mine) do
        if i <= extra or (cutoff and row[2] < cutoff) then
          if row[3] then workflows = 1 else doomed[row[1]] = true end
        end
      end
    end
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
return {deleted, workflows}
