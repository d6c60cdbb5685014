-- renew-1: extend the leases of jobs still active under their token (renew_leases).
-- KEYS[1] active      active jobs by lease_until
-- ARGV[1] key prefix; ARGV[2] lease (seconds); then pairs (job id, lease token)
-- Returns {renewed ids}, {lost ids}, {renewed ids with a cancel request}.
local now = now_time()
local lease_until = now + tonumber(ARGV[2])
local lutext = fmt(lease_until)
local renewed, lost, cancel = {}, {}, {}
local act = {}
for i = 3, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local key = jkey(id)
  local f = redis.call('HMGET', key, 's', 'lt', 'cr')
  if f[1] == 'active' and f[2] == token then
    redis.call('HSET', key, 'lu', lutext)
    act[#act + 1] = lease_until
    act[#act + 1] = id
    renewed[#renewed + 1] = id
    if f[3] == '1' then cancel[#cancel + 1] = id end
  else
    lost[#lost + 1] = id
  end
end
add_active(KEYS[1], act)
return {renewed, lost, cancel}
