-- circuit-reset-2: close a task's circuit (reset_circuit) and wake workers.
-- KEYS[1] circuits    tasks that have a circuit
-- KEYS[2] wake        (channel) wake-up notifications
-- ARGV[1] key prefix; ARGV[2] task
local ck = circuitkey(ARGV[2])
if redis.call('EXISTS', ck) == 1 then
  redis.call('HSET', ck, 'state', 'closed', 'failures', 0)
  redis.call('HDEL', ck, 'open_until')
  redis.call('PUBLISH', KEYS[2], 'a:')
end
return 1
