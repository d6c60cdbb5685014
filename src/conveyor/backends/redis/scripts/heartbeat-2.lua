-- heartbeat-2: upsert a worker, stamped with the server's clock (record_heartbeat).
-- KEYS[1] workers     worker id -> JSON description
-- KEYS[2] seen        worker id by last_seen
-- ARGV[1] key prefix; ARGV[2] worker id; ARGV[3] JSON description
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
redis.call('ZADD', KEYS[2], now_time(), ARGV[2])
return 1
