-- schedule-sync-1: store the code's schedules (sync_schedules). A same
-- fingerprint leaves the record untouched; a changed one replaces the definition,
-- drops a cron/every override and resets next_fire_at (paused and fires kept).
-- KEYS[1] schedules   every schedule name
-- ARGV[1] key prefix; then groups of 6: name, fingerprint, spec JSON,
--   cron|'', every|'', first fire|''
-- Returns per name its record {field, value...}.
local now = fmt(now_time())
local out = {}
for i = 2, #ARGV, 6 do
  local name = ARGV[i]
  local key = schedkey(name)
  local fp = redis.call('HGET', key, 'fp')
  if not fp then
    redis.call('HSET', key, 'spec', ARGV[i + 2], 'fp', ARGV[i + 1], 'cron', ARGV[i + 3],
      'every', ARGV[i + 4], 'paused', '0', 'next', ARGV[i + 5], 'fires', 0, 'last', '',
      'upd', now)
    redis.call('SADD', KEYS[1], name)
  elseif fp ~= ARGV[i + 1] then
    redis.call('HSET', key, 'spec', ARGV[i + 2], 'fp', ARGV[i + 1], 'cron', ARGV[i + 3],
      'every', ARGV[i + 4], 'next', ARGV[i + 5], 'upd', now)
  end
  out[#out + 1] = redis.call('HGETALL', key)
end
return out
