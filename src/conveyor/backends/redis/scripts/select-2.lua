-- select-2: list, count or purge the jobs matching a filter (list_jobs,
-- count_jobs, purge_jobs). Newest first by id (ids increase with creation).
-- KEYS[1] all         lex index of every job id
-- KEYS[2] queues      every queue name seen
-- ARGV[1] key prefix; ARGV[2] mode: list|count|purge; ARGV[3] offset; ARGV[4] limit
-- ARGV[5] states, comma-separated|'' (any); ARGV[6] queue|''; ARGV[7] task|'';
-- ARGV[8] tenant|''; ARGV[9] failure reason|''; ARGV[10] idempotency key|'';
-- ARGV[11] finished before|''; ARGV[12] workflow id|''
-- Blocked jobs are read from the `blocked` index. A workflow filter reads the
-- workflow's index (wfj:) instead, when it has one (see wfkey in lib.lua).
-- Returns list: {{field, value...}...}; count and purge: a number.
local mode, offset, limit = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local states = nil
if ARGV[5] ~= '' then
  states = {}
  for s in string.gmatch(ARGV[5], '[^,]+') do states[s] = true end
end
local fq, ft, ftn, ffr, fik = ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]
local fbefore = tonumber(ARGV[11])
local fwf = ARGV[12]
if mode == 'list' and limit <= 0 then return {} end
local plain = ft == '' and ftn == '' and ffr == '' and fik == '' and not fbefore and fwf == ''

-- Counting by state and queue only: the per-queue counters answer it.
if mode == 'count' and plain then
  if not states and fq == '' then return redis.call('ZCARD', KEYS[1]) end
  local qs = fq ~= '' and {fq} or redis.call('SMEMBERS', KEYS[2])
  local total = 0
  for _, q in ipairs(qs) do
    local row = redis.call('HGETALL', nkey(q))
    for i = 1, #row, 2 do
      if not states or states[row[i]] then total = total + tonumber(row[i + 1]) end
    end
  end
  return total
end

local ids
if fwf ~= '' and redis.call('EXISTS', wfkey(fwf)) == 1 then
  -- Only this workflow's jobs, newest first; the loop below checks the rest.
  ids = redis.call('ZRANGE', wfkey(fwf), '+', '-', 'BYLEX', 'REV')
elseif states then
  ids = {}
  for s, _ in pairs(states) do
    if s == 'waiting' then
      local qs = fq ~= '' and {fq} or redis.call('SMEMBERS', KEYS[2])
      for _, q in ipairs(qs) do
        for _, s in ipairs(waiting_sets(q)) do
          if ft == '' or ft == s[2] then
            for _, m in ipairs(redis.call('ZRANGE', s[1], 0, -1)) do
              ids[#ids + 1] = string.sub(m, 18)
            end
          end
        end
      end
    else
      local index = nil
      if s == 'delayed' then index = PFX .. 'delayed'
      elseif s == 'active' then index = PFX .. 'active'
      elseif s == 'blocked' then index = K_BLOCKED
      elseif TERMINAL[s] then index = donekey(s) end
      if index then
        for _, id in ipairs(redis.call('ZRANGE', index, 0, -1)) do ids[#ids + 1] = id end
      end
    end
  end
  table.sort(ids, function(a, b) return a > b end)
end

local out = {}
local matched = 0
local counts = {}
local done = false
-- Without a state filter, walk the id index newest first, a slice at a time,
-- so a listing stops reading once it has its page.
local slice_at = 0
local states_free_ids = {}
if not ids and mode == 'purge' then
  -- Purging deletes from the index it walks: read it whole first.
  states_free_ids = redis.call('ZRANGE', KEYS[1], '+', '-', 'BYLEX', 'REV')
end
local function next_ids()
  if ids or mode == 'purge' then
    if slice_at > 0 then return {} end
    slice_at = 1
    if ids then return ids end
    return states_free_ids
  end
  local slice = redis.call('ZRANGE', KEYS[1], '+', '-', 'BYLEX', 'REV', 'LIMIT', slice_at, 1000)
  slice_at = slice_at + 1000
  return slice
end
local batch = next_ids()
while #batch > 0 and not done do
for _, id in ipairs(batch) do
  local key = jkey(id)
  local f = redis.call('HMGET', key, 's', 'q', 't', 'tn', 'fr', 'ik', 'fa', 'wf')
  local ok = f[1] ~= false
    and (not states or states[f[1]])
    and (fq == '' or f[2] == fq)
    and (ft == '' or f[3] == ft)
    and (ftn == '' or f[4] == ftn)
    and (ffr == '' or f[5] == ffr)
    and (fik == '' or f[6] == fik)
    and (not fbefore or (f[7] and tonumber(f[7]) < fbefore))
    and (fwf == '' or f[8] == fwf)
  if ok then
    if mode == 'list' then
      matched = matched + 1
      if matched > offset then
        out[#out + 1] = job_row(id)
        if #out >= limit then
          done = true
          break
        end
      end
    elseif mode == 'count' then
      matched = matched + 1
    elseif f[1] ~= 'active' then
      remove_job(id, counts)
      matched = matched + 1
    end
  end
end
if not done then batch = next_ids() end
end
if mode == 'list' then return out end
flush(counts)
return matched
