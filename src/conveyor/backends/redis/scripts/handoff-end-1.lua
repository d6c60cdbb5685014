-- handoff-end-1: a worker stops taking direct handoffs (end_handoffs): its idle
-- registration goes, the jobs in its inbox are returned (their leases renewed
-- from now: the worker releases them), and an empty item ends its pop.
-- KEYS[1] active     active jobs by lease_until
-- ARGV[1] key prefix
-- ARGV[2] worker id        ARGV[3] lease (seconds)
-- Returns what claim-4 returns: packed {{lease group...}, {expired row...}}.
local now = now_time()
local worker = ARGV[2]
unregister_idle(worker)
local groups, expired = take_inbox(now, worker, tonumber(ARGV[3]), math.huge)
redis.call('RPUSH', inboxkey(worker), '')
redis.call('PEXPIRE', inboxkey(worker), 60000)
return cmsgpack.pack({groups, expired})
