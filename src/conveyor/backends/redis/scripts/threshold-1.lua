-- threshold-1: where a retention count rule starts deleting: the keep-th
-- newest job of its scope (done:<state>, newest first by finished_at, then id).
-- KEYS[1] all         (only routes the call to the prefix's slot)
-- ARGV[1] key prefix; ARGV[2] state; ARGV[3] keep (>= 1); ARGV[4] task|'';
--   ARGV[5] number of excluded tasks k, then k task names
-- Returns {finished_at, id}, or {} when the scope holds fewer jobs.
local index = donekey(ARGV[2])
local keep, task, k = tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
if task == '' and k == 0 then
  local row = redis.call('ZREVRANGE', index, keep - 1, keep - 1, 'WITHSCORES')
  if #row == 0 then return {} end
  return {row[2], row[1]}
end
local excluded = {}
for j = 1, k do excluded[ARGV[5 + j]] = true end
local rows = redis.call('ZREVRANGE', index, 0, -1, 'WITHSCORES')
local seen = 0
for i = 1, #rows, 2 do
  local t = redis.call('HGET', jkey(rows[i]), 't')
  if t and ((task ~= '' and t == task) or (task == '' and not excluded[t])) then
    seen = seen + 1
    if seen == keep then return {rows[i + 1], rows[i]} end
  end
end
return {}
