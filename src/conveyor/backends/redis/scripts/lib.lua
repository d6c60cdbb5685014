-- Shared helpers, prepended to every script when it is loaded (scripts.py).
-- Key names mirror conveyor/backends/redis/keys.py: PFX is the app's hash-tagged
-- base ("{conveyor:<prefix>}:"), passed as ARGV[1] to every script, so every
-- key a script touches lives in one cluster slot.
local PFX = ARGV[1]
local function jkey(id) return PFX .. 'j:' .. id end
-- The payload lives in its own string: a hash holding a value over 64 bytes
-- stops being a compact listpack and costs ~3x the memory.
local function pkey(id) return PFX .. 'p:' .. id end
local function wkey(q, t) return PFX .. 'w:' .. #q .. ':' .. q .. ':' .. t end
local function wtkey(q) return PFX .. 'wt:' .. q end
local function nkey(q) return PFX .. 'n:' .. q end
local function qckey(q) return PFX .. 'qc:' .. q end
local function idemkey(k) return PFX .. 'idem:' .. k end
local function ratekey(t) return PFX .. 'rate:' .. t end
local function circuitkey(t) return PFX .. 'circuit:' .. t end
local function donekey(s) return PFX .. 'done:' .. s end
local function schedkey(n) return PFX .. 'sched:' .. n end
local function minutekey(m) return PFX .. 'sm:' .. m end
local K_ALL = PFX .. 'all'
local K_DELAYED = PFX .. 'delayed'
local K_EXPIRING = PFX .. 'expiring'
local K_ACTIVE = PFX .. 'active'
local K_QUEUES = PFX .. 'queues'
local K_CIRCUITS = PFX .. 'circuits'
local K_WAKE = PFX .. 'wake'

-- The server's clock (G11); Redis 7 replicates a script's effects, not the script.
local function now_time()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

-- Exact text of a float (tostring keeps only 14 digits).
local function fmt(x) return string.format('%.17g', x) end

-- A waiting job's member in its (queue, task) sorted set: the score is -priority,
-- and members of one score sort by run_at (microseconds, fixed width), then id.
local function wmember(run_at, id)
  local micros = math.max(0, tonumber(run_at)) * 1000000
  return string.format('%017.0f', micros) .. id
end

local function enter_waiting(id, q, t, pr, ra, ex)
  redis.call('ZADD', wkey(q, t), -(tonumber(pr) or 0), wmember(ra, id))
  redis.call('SADD', wtkey(q), t)
  if ex then redis.call('ZADD', K_EXPIRING, ex, id) end
end

local function leave_waiting(id, q, t, pr, ra)
  redis.call('ZREM', wkey(q, t), wmember(ra, id))
  redis.call('ZREM', K_EXPIRING, id)
end

-- Per-queue state counts, batched: bump(c, q, from, to) then flush(c).
local function bump(c, q, from, to)
  local row = c[q]
  if not row then row = {}; c[q] = row end
  if from then row[from] = (row[from] or 0) - 1 end
  if to then row[to] = (row[to] or 0) + 1 end
end

local function flush(c)
  for q, row in pairs(c) do
    for state, d in pairs(row) do
      if d ~= 0 then redis.call('HINCRBY', nkey(q), state, d) end
    end
  end
end

-- Append one JSON-encoded error to a job's JSON error list.
local function append_error(key, err)
  local old = redis.call('HGET', key, 'e')
  if not old or old == '' or old == '[]' then
    redis.call('HSET', key, 'e', '[' .. err .. ']')
  else
    redis.call('HSET', key, 'e', string.sub(old, 1, -2) .. ',' .. err .. ']')
  end
end

local function json_error(kind, message, attempt, reason, now)
  return '{"type":' .. cjson.encode(kind) .. ',"message":' .. cjson.encode(message)
    .. ',"traceback":"","attempt":' .. tostring(tonumber(attempt) or 0)
    .. ',"reason":' .. cjson.encode(reason) .. ',"at":' .. fmt(now) .. '}'
end

local TERMINAL = {completed = true, failed = true, cancelled = true}

-- Take a job out of the index of its current state.
local function unindex(id, s, q, t, pr, ra)
  if s == 'waiting' then leave_waiting(id, q, t, pr, ra)
  elseif s == 'delayed' then redis.call('ZREM', K_DELAYED, id)
  elseif s == 'active' then redis.call('ZREM', K_ACTIVE, id)
  elseif TERMINAL[s] then redis.call('ZREM', donekey(s), id) end
end

-- Delete a job (never an active one: callers check); its idempotency key, if it
-- still points here, remembers the state the job had.
local function remove_job(id, counts)
  local key = jkey(id)
  local f = redis.call('HMGET', key, 's', 'q', 't', 'pr', 'ra', 'ik')
  if not f[1] then return false end
  unindex(id, f[1], f[2], f[3], f[4], f[5])
  redis.call('ZREM', K_ALL, id)
  redis.call('DEL', key, pkey(id))
  bump(counts, f[2], f[1], nil)
  if f[6] then
    local ik = idemkey(f[6])
    if redis.call('HGET', ik, 'id') == id then redis.call('HSET', ik, 'state', f[1]) end
  end
  return true
end

-- redis.call(cmd, key, list...) in slices: unpack has a stack limit.
local function call_many(cmd, key, list, step)
  step = step or 4000
  for i = 1, #list, step do
    redis.call(cmd, key, unpack(list, i, math.min(i + step - 1, #list)))
  end
end

-- The active index keeps one member longer than zset-max-listpack-value with an
-- infinite score, so Redis stores it as a skiplist for good: a small listpack
-- sorted set with float scores costs ~8 us per inserted member (a linear scan
-- that parses every score), a skiplist ~0.5 us. Readers never see it: stall
-- recovery reads scores below now, everything else names its ids.
local ACTIVE_ANCHOR = string.rep('~', 80)
local function add_active(key, list)
  if #list == 0 then return end
  redis.call('ZADD', key, 'NX', 'inf', ACTIVE_ANCHOR)
  call_many('ZADD', key, list)
end

-- A job as {field, value...}, its id included (the hash does not store it).
local function job_row(id)
  local row = redis.call('HGETALL', jkey(id))
  if #row == 0 then return row end
  row[#row + 1] = 'id'
  row[#row + 1] = id
  row[#row + 1] = 'p'
  row[#row + 1] = redis.call('GET', pkey(id))
  return row
end
