-- configure-2: create or update a queue's limits, keeping its paused flag
-- (configure_queue).
-- KEYS[1] queues      every queue name seen
-- KEYS[2] wake        (channel) wake-up notifications
-- ARGV[1] key prefix; ARGV[2] queue; ARGV[3] max_size|''; ARGV[4] ttl|''
local key = qckey(ARGV[2])
redis.call('SADD', KEYS[1], ARGV[2])
redis.call('HSET', key, 'configured', '1')
if ARGV[3] ~= '' then redis.call('HSET', key, 'max_size', ARGV[3]) else redis.call('HDEL', key, 'max_size') end
if ARGV[4] ~= '' then redis.call('HSET', key, 'ttl', ARGV[4]) else redis.call('HDEL', key, 'ttl') end
return 1
