-- pause-2: pause or resume a queue (set_queue_paused); resuming wakes workers.
-- KEYS[1] queues      every queue name seen
-- KEYS[2] wake        (channel) wake-up notifications
-- ARGV[1] key prefix; ARGV[2] queue; ARGV[3] 1 (pause) or 0 (resume)
local key = qckey(ARGV[2])
redis.call('SADD', KEYS[1], ARGV[2])
redis.call('HSET', key, 'configured', '1', 'paused', ARGV[3])
if ARGV[3] == '0' then redis.call('PUBLISH', KEYS[2], 'q:' .. ARGV[2]) end
return 1
