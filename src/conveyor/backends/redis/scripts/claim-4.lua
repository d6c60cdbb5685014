-- claim-4: promote due delayed jobs, expire waiting jobs past their TTL, then
-- claim up to `limit` due jobs, priority DESC, run_at ASC, id ASC (claim_jobs).
-- Jobs an enqueue already claimed for this worker (direct handoff) and that it
-- has not popped come first and count against `limit` (any beyond it stay in
-- its inbox). A claim that comes back short registers the worker as idle for
-- `handoff ttl` seconds (0, or task caps, rate limits, key caps or per-key rate
-- limits given: never).
-- Each claimed job takes its (task, concurrency_key) slot (ka:<len>:<task>[:key]
-- sets, lib.lua), with or without key caps.
-- An expired job that has dependents (flag dn) resolves them here
-- (resolve_dependents, lib.lua: their hashes, dep:<id>, blocked, delayed,
-- w:/wt:, done:cancelled, n:<queue>, and wake-ups on `wake` for those released).
-- KEYS[1] delayed    delayed jobs by run_at
-- KEYS[2] expiring   waiting jobs with a TTL, by expires_at
-- KEYS[3] active     active jobs by lease_until
-- KEYS[4] done:failed  failed jobs by finished_at
-- ARGV[1] key prefix
-- ARGV[2] worker id        ARGV[3] limit       ARGV[4] lease (seconds)
-- ARGV[5] lease token      ARGV[6] honour circuits (1/0)
-- ARGV[7] handoff ttl (seconds; 0 = do not register)
-- ARGV[8] number of queues nq, then nq queue names
-- then the number of task caps nc, then nc pairs (task, cap)
-- then the number of rate limits nr, then nr triples (task, limit, period)
-- then the number of key caps nk, then nk pairs (task, most active jobs per key)
-- then the number of per-key rate limits nkr, then nkr triples (task, limit,
--   period): one window per (task, rate_limit_key), rk: keys (lib.lua)
-- Returns, packed with MessagePack (one string to convert, not one per field),
-- {{lease group (lib.lua) per claim or handoff the jobs came from},
--  {{field, value...} per expired job}}.
local now = now_time()
local worker, limit, lease, token = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local circuits_on = ARGV[6] == '1'
local handoff_ttl = tonumber(ARGV[7])
local pos = 8
local nq = tonumber(ARGV[pos]); pos = pos + 1
local queues = {}
for i = 1, nq do queues[i] = ARGV[pos]; pos = pos + 1 end
local caps = {}
local nc = tonumber(ARGV[pos]); pos = pos + 1
for _ = 1, nc do caps[ARGV[pos]] = tonumber(ARGV[pos + 1]); pos = pos + 2 end
local rates = {}
local nr = tonumber(ARGV[pos]); pos = pos + 1
for _ = 1, nr do
  rates[ARGV[pos]] = {tonumber(ARGV[pos + 1]), tonumber(ARGV[pos + 2])}
  pos = pos + 3
end
local keycaps = {}
local nk = tonumber(ARGV[pos]); pos = pos + 1
for _ = 1, nk do keycaps[ARGV[pos]] = tonumber(ARGV[pos + 1]); pos = pos + 2 end
local keyrates = {}
local nkr = tonumber(ARGV[pos]); pos = pos + 1
for _ = 1, nkr do
  keyrates[ARGV[pos]] = {tonumber(ARGV[pos + 1]), tonumber(ARGV[pos + 2])}
  pos = pos + 3
end

unregister_idle(worker)
local groups, handed_expired, taken = take_inbox(now, worker, lease, math.max(limit, 0))
local counts = {}
local group, expired = claim_for(now, worker, limit - taken, lease, token, circuits_on,
  queues, caps, rates, keycaps, keyrates, counts)
flush(counts)
taken = taken + #group[5]
if #group[5] > 0 then groups[#groups + 1] = group end
for _, row in ipairs(expired) do handed_expired[#handed_expired + 1] = row end
-- A stored request cannot keep caps and rate limits up to date: such workers
-- are woken, never handed work.
if handoff_ttl > 0 and nc == 0 and nr == 0 and nk == 0 and nkr == 0 and taken < limit then
  register_idle(now, worker, limit - taken, lease, token, circuits_on, queues, handoff_ttl)
end
return cmsgpack.pack({groups, handed_expired})
