-- schedule-advance-1: compare-and-set after a fire was enqueued (advance_schedule).
-- KEYS[1] schedules   every schedule name
-- ARGV[1] key prefix; ARGV[2] name; ARGV[3] fired_at (exact text of the stored
-- next fire); ARGV[4] next fire|''; ARGV[5] '1' a fire was enqueued, '0' a
-- missed slot was skipped (only next fire moves)
-- Returns 1 when it moved, 0 when another scheduler already did.
local key = schedkey(ARGV[2])
local next_ = redis.call('HGET', key, 'next')
if not next_ or next_ == '' or next_ ~= ARGV[3] then return 0 end
redis.call('HSET', key, 'next', ARGV[4], 'upd', fmt(now_time()))
if ARGV[5] == '1' then
  redis.call('HSET', key, 'last', ARGV[3])
  redis.call('HINCRBY', key, 'fires', 1)
end
return 1
