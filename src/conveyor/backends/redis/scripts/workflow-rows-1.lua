-- workflow-rows-1: one page of the jobs that belong to a workflow, for the
-- retention of whole workflows (maintenance.py prune_workflows).
-- KEYS[1] all         lex index of every job id (read by pages)
-- ARGV[1] key prefix; ARGV[2] the last id of the previous page|'' (from the
--   start); ARGV[3] page size
-- Returns {next cursor|'' (no more), then per workflow job: workflow id, id,
--   state, task, finished_at|''}.
local size = tonumber(ARGV[3])
local start = ARGV[2] == '' and '-' or '(' .. ARGV[2]
local ids = redis.call('ZRANGEBYLEX', KEYS[1], start, '+', 'LIMIT', 0, size)
local out = {#ids == size and ids[#ids] or ''}
for _, id in ipairs(ids) do
  local f = redis.call('HMGET', jkey(id), 'wf', 's', 't', 'fa')
  if f[1] and f[2] then
    out[#out + 1] = f[1]
    out[#out + 1] = id
    out[#out + 1] = f[2]
    out[#out + 1] = f[3] or ''
    out[#out + 1] = f[4] or ''
  end
end
return out
