-- configure-2: create or update a queue's limits and fairness, keeping its
-- paused flag (configure_queue).
-- KEYS[1] queues      every queue name seen
-- KEYS[2] wake        (channel) wake-up notifications
-- ARGV[1] key prefix; ARGV[2] queue; ARGV[3] max_size|''; ARGV[4] ttl|'';
-- ARGV[5] fairness ('tenant'|''); ARGV[6] number of weights nw, then nw pairs
-- (tenant, weight)
-- Switching fairness moves the queue's waiting jobs, in this script, between
-- the per-task sets (w:, wt:) and the per-tenant ones (fw:, ftk:, fq:), each
-- keeping its place within its tenant and task. A queue made fair starts
-- every tenant at vtime 0; a queue made plain forgets its passes and vtime
-- (fs:, qc: field fv), so making it fair again starts afresh. Weights are
-- replaced (qw:, and their number in qc: field nw).
local q = ARGV[2]
local key = qckey(q)
redis.call('SADD', KEYS[1], q)
redis.call('HSET', key, 'configured', '1')
if ARGV[3] ~= '' then redis.call('HSET', key, 'max_size', ARGV[3]) else redis.call('HDEL', key, 'max_size') end
if ARGV[4] ~= '' then redis.call('HSET', key, 'ttl', ARGV[4]) else redis.call('HDEL', key, 'ttl') end

local was_fair = is_fair(q)
local fair = ARGV[5] == 'tenant'
local qw = qwkey(q)
redis.call('DEL', qw)
local nw = tonumber(ARGV[6])
if not fair then nw = 0 end
if nw > 0 then redis.call('HSET', key, 'nw', nw) else redis.call('HDEL', key, 'nw') end
if nw > 0 then
  local pairs_ = {}
  for i = 0, nw - 1 do
    pairs_[#pairs_ + 1] = tcode(ARGV[7 + 2 * i])
    pairs_[#pairs_ + 1] = ARGV[8 + 2 * i]
  end
  call_many('HSET', qw, pairs_)
end
if fair == was_fair then return 1 end

local sets = waiting_sets(q)
local moved = 0
if fair then
  redis.call('HSET', key, 'fair', 'tenant')
  FAIR[q] = true
  redis.call('DEL', fqkey(q), fskey(q))
  redis.call('HDEL', key, 'fv')
  for _, s in ipairs(sets) do
    local wk, t = s[1], s[2]
    local rows = redis.call('ZRANGE', wk, 0, -1, 'WITHSCORES')
    local lanes = {}
    for i = 1, #rows, 2 do
      local tn = redis.call('HGET', jkey(string.sub(rows[i], 18)), 'tn')
      local fk = waiting_set(q, t, tn)
      local lane = lanes[fk]
      if not lane then
        lane = {}
        lanes[fk] = lane
        note_waiting(q, t, tn)
      end
      lane[#lane + 1] = rows[i + 1]
      lane[#lane + 1] = rows[i]
    end
    for fk, lane in pairs(lanes) do call_many('ZADD', fk, lane) end
    moved = moved + #rows / 2
    redis.call('DEL', wk)
  end
  redis.call('DEL', wtkey(q))
else
  redis.call('HDEL', key, 'fair')
  FAIR[q] = false
  for _, s in ipairs(sets) do
    local fk, t = s[1], s[2]
    local rows = redis.call('ZRANGE', fk, 0, -1, 'WITHSCORES')
    local list = {}
    for i = 1, #rows, 2 do
      list[#list + 1] = rows[i + 1]
      list[#list + 1] = rows[i]
    end
    if #list > 0 then
      call_many('ZADD', wkey(q, t), list)
      note_waiting(q, t, nil)
    end
    moved = moved + #rows / 2
    redis.call('DEL', fk)
  end
  redis.call('DEL', fqkey(q), fskey(q), ftkkey(q))
  redis.call('HDEL', key, 'fv')
end
if moved > 0 then redis.call('PUBLISH', KEYS[2], 'q:' .. q) end
return 1
