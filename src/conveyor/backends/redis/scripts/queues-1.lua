-- queues-1: every known queue with its settings and state counts (list_queues,
-- queue_counts) and the run_at of its oldest waiting job (oldest_waiting).
-- KEYS[1] queues      every queue name seen
-- ARGV[1] key prefix
-- Returns per queue {name, configured|false, paused|false, max_size|false,
-- ttl|false, {state, count...}, oldest run_at|'', fairness|false,
-- {tenant code, weight...}}.
local out = {}
for _, q in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local conf = redis.call('HMGET', qckey(q), 'configured', 'paused', 'max_size', 'ttl', 'fair')
  FAIR[q] = conf[5] == 'tenant'
  local oldest = nil
  for _, s in ipairs(waiting_sets(q)) do
    -- One head per priority: members of a score sort by run_at.
    local wk = s[1]
    local head = redis.call('ZRANGE', wk, 0, 0, 'WITHSCORES')
    while #head > 0 do
      local ra = redis.call('HGET', jkey(string.sub(head[1], 18)), 'ra')
      if ra and (not oldest or tonumber(ra) < tonumber(oldest)) then oldest = ra end
      head = redis.call('ZRANGE', wk, '(' .. head[2], '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
    end
  end
  out[#out + 1] = {q, conf[1], conf[2], conf[3], conf[4], redis.call('HGETALL', nkey(q)),
    oldest or '', conf[5], redis.call('HGETALL', qwkey(q))}
end
return out
