-- delete-1: delete jobs in any state but active (delete_jobs).
-- KEYS[1] all         lex index of every job id
-- ARGV[1] key prefix; then job ids
-- Returns how many were deleted.
local counts = {}
local deleted = 0
local done = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  if not done[id] then
    done[id] = true
    local s = redis.call('HGET', jkey(id), 's')
    if s and s ~= 'active' and remove_job(id, counts) then deleted = deleted + 1 end
  end
end
flush(counts)
return deleted
