-- progress-1: store progress of jobs still active under their token (save_progress).
-- KEYS[1] active      (unused but named: routes the call to the app's slot)
-- ARGV[1] key prefix; then triples (job id, lease token, progress JSON)
-- Returns {refused ids}.
local refused = {}
for i = 2, #ARGV, 3 do
  local key = jkey(ARGV[i])
  local f = redis.call('HMGET', key, 's', 'lt')
  if f[1] == 'active' and f[2] == ARGV[i + 1] then
    redis.call('HSET', key, 'pg', ARGV[i + 2])
  else
    refused[#refused + 1] = ARGV[i]
  end
end
return refused
