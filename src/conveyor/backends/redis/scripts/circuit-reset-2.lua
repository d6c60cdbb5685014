-- circuit-reset-2: close a task's circuit (reset_circuit) and wake workers, or
-- forget the failures of closed circuits (clear_circuit_failures).
-- KEYS[1] circuits    tasks that have a circuit
-- KEYS[2] wake        (channel) wake-up notifications
-- ARGV[1] key prefix; ARGV[2] task ('' with mode 'failures': every task);
-- ARGV[3] mode: 'close' (reset_circuit) or 'failures' (clear_circuit_failures)
if ARGV[3] == 'failures' then
  local tasks = {ARGV[2]}
  if ARGV[2] == '' then tasks = redis.call('SMEMBERS', KEYS[1]) end
  for _, task in ipairs(tasks) do
    local ck = circuitkey(task)
    if redis.call('HGET', ck, 'state') == 'closed' then
      redis.call('HSET', ck, 'failures', 0)
    end
  end
  return 1
end
local ck = circuitkey(ARGV[2])
if redis.call('EXISTS', ck) == 1 then
  redis.call('HSET', ck, 'state', 'closed', 'failures', 0)
  redis.call('HDEL', ck, 'open_until')
  redis.call('PUBLISH', KEYS[2], 'a:')
end
return 1
