-- stats-read-2: totals (job_stat_totals), series rows since a time
-- (job_stat_series), or pruning old series minutes (prune_job_stats).
-- KEYS[1] stats       totals: row -> "count sum bucket..."
-- KEYS[2] minutes     series minutes (POSIX start) that hold rows
-- ARGV[1] key prefix; ARGV[2] 'totals' | 'series' | 'prune'; ARGV[3] since
-- (series) or older_than (prune) seconds
-- Returns totals: {row, value...}; series: {{minute, {row, value...}}...};
-- prune: how many rows were deleted.
local mode = ARGV[2]
if mode == 'totals' then return redis.call('HGETALL', KEYS[1]) end
if mode == 'series' then
  local out = {}
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], ARGV[3], '+inf')) do
    out[#out + 1] = {m, redis.call('HGETALL', minutekey(m))}
  end
  return out
end
local cutoff = now_time() - tonumber(ARGV[3])
local n = 0
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. fmt(cutoff))) do
  n = n + redis.call('HLEN', minutekey(m))
  redis.call('DEL', minutekey(m))
  redis.call('ZREM', KEYS[2], m)
end
return n
