-- schedule-read-1: every stored schedule (list_schedules), or delete some
-- (delete_schedules).
-- KEYS[1] schedules   every schedule name
-- ARGV[1] key prefix; ARGV[2] 'list' or 'delete'; then names to delete
-- Returns list: {{field, value...}...}; delete: how many existed.
if ARGV[2] == 'delete' then
  local n = 0
  for i = 3, #ARGV do
    n = n + redis.call('DEL', schedkey(ARGV[i]))
    redis.call('SREM', KEYS[1], ARGV[i])
  end
  return n
end
local out = {}
for _, name in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local row = redis.call('HGETALL', schedkey(name))
  if #row > 0 then out[#out + 1] = row end
end
return out
