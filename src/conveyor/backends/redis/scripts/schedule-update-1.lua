-- schedule-update-1: operator changes to one schedule (update_schedule).
-- KEYS[1] schedules   every schedule name
-- ARGV[1] key prefix; ARGV[2] name; ARGV[3] paused: '1'|'0'|'' (unchanged);
-- ARGV[4] cron|''; ARGV[5] every|''; ARGV[6] '1' to replace next fire;
-- ARGV[7] next fire|''
-- Returns the record {field, value...}, or an empty list when there is none.
local key = schedkey(ARGV[2])
if redis.call('EXISTS', key) == 0 then return {} end
if ARGV[3] ~= '' then redis.call('HSET', key, 'paused', ARGV[3]) end
if ARGV[4] ~= '' then redis.call('HSET', key, 'cron', ARGV[4], 'every', '') end
if ARGV[5] ~= '' then redis.call('HSET', key, 'every', ARGV[5], 'cron', '') end
if ARGV[6] == '1' then redis.call('HSET', key, 'next', ARGV[7]) end
redis.call('HSET', key, 'upd', fmt(now_time()))
return redis.call('HGETALL', key)
