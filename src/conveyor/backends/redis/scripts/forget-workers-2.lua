-- forget-workers-2: delete workers not seen since now - older_than (prune_workers),
-- or the one named (remove_worker).
-- KEYS[1] workers     worker id -> JSON description
-- KEYS[2] seen        worker id by last_seen
-- ARGV[1] key prefix; ARGV[2] older_than seconds|''; ARGV[3] worker id|''
-- Returns how many were deleted.
local gone
if ARGV[3] ~= '' then
  gone = {ARGV[3]}
else
  gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. fmt(now_time() - tonumber(ARGV[2])))
end
local n = 0
for _, id in ipairs(gone) do
  n = n + redis.call('HDEL', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
end
return n
