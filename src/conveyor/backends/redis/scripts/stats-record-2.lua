-- stats-record-2: add finished-run increments to the cumulative totals and to
-- the current minute's series row (record_job_stats).
-- KEYS[1] stats       totals: row -> "count sum bucket..."
-- KEYS[2] minutes     series minutes (POSIX start) that hold rows
-- ARGV[1] key prefix; ARGV[2] number of buckets nb; then groups of 5 + nb:
--   task, queue, status, count, duration sum, nb bucket counts
-- A row is task NUL queue NUL status.
local now = now_time()
local minute = math.floor(now / 60) * 60
local mkey = minutekey(string.format('%d', minute))
local nb = tonumber(ARGV[2])
local function add(key, row, b)
  local old = redis.call('HGET', key, row)
  local vals = {}
  if old then for v in string.gmatch(old, '[^ ]+') do vals[#vals + 1] = tonumber(v) end end
  local new = {}
  new[1] = string.format('%d', (vals[1] or 0) + tonumber(ARGV[b + 4]))
  new[2] = fmt((vals[2] or 0) + tonumber(ARGV[b + 5]))
  for j = 1, nb do
    new[j + 2] = string.format('%d', (vals[j + 2] or 0) + tonumber(ARGV[b + 5 + j]))
  end
  redis.call('HSET', key, row, table.concat(new, ' '))
end
for b = 2, #ARGV - 1, 5 + nb do
  local row = ARGV[b + 1] .. '\0' .. ARGV[b + 2] .. '\0' .. ARGV[b + 3]
  add(KEYS[1], row, b)
  add(mkey, row, b)
end
redis.call('ZADD', KEYS[2], minute, string.format('%d', minute))
return 1
