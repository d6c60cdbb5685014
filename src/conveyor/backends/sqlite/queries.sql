-- Every statement the SQLite backend runs, one named block each.
--
-- queries.py parses this file once into typed LiteralString attributes. Values
-- are always bound parameters (never formatted in); a variable-length list is
-- one JSON array parameter read with json_each(). A block that returns jobs
-- lists exactly the columns of JOB_COLUMNS in queries.py (checked at load),
-- those that finish jobs then has_dependents.
--
-- Plans are pinned where the planner, without statistics, could pick a broad
-- index and walk every job in a state: INDEXED BY names the partial index a
-- statement must use, and "+state" keeps an id lookup on the primary key.
--
-- Parameter styles: ":name" blocks are bound with a dict; "?N" blocks are run
-- with executemany() over tuples (cheaper per row).


-- ---------------------------------------------------------------- enqueue --

-- name: queue_configs
-- The limits of the queues a batch touches (:names, a JSON array) and whether
-- each is fair (its jobs are stored with fair = 1). Tables: queues.
SELECT name, max_size, ttl, fairness IS NOT NULL
FROM queues
WHERE name IN (SELECT value FROM json_each(:names));

-- name: live_keys
-- Idempotency keys among :keys (a JSON array) still live at :now. Tables: idempotency_keys.
SELECT key, job_id, task, queue, final_state
FROM idempotency_keys
WHERE key IN (SELECT value FROM json_each(:keys)) AND expires_at > :now;

-- name: count_pending
-- Waiting + delayed jobs of one queue, for backpressure. Tables: jobs
-- (jobs_claim, jobs_delayed; index-only).
SELECT (SELECT count(*) FROM jobs INDEXED BY jobs_claim
        WHERE state = 'waiting' AND queue = :queue)
     + (SELECT count(*) FROM jobs INDEXED BY jobs_delayed
        WHERE state = 'delayed' AND queue = :queue);

-- name: insert_job
-- Insert one new job (executemany over a batch). Tables: jobs.
INSERT INTO jobs (id, task, queue, state, priority, max_attempts, timeout, ttl, run_at,
                  created_at, expires_at, idempotency_key, tenant, retry_of, payload, metadata)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16);

-- name: insert_fair_job
-- insert_job for a job of a fair queue: the same 16 parameters, fair = 1 (a
-- constant, so a plain job binds nothing more). Tables: jobs.
INSERT INTO jobs (id, task, queue, state, priority, max_attempts, timeout, ttl, run_at,
                  created_at, expires_at, idempotency_key, tenant, retry_of, payload, metadata,
                  fair)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, 1);

-- name: insert_plain_job
-- Insert one new job with no options (no timeout, TTL, idempotency key,
-- tenant, retry_of or metadata), 9 parameters instead of 16 (executemany).
-- Python's sqlite3 binds an int, float or str cheaply, but looks up an adapter
-- for every None (and bytes): leaving those columns out halves the cost of an
-- insert. Tables: jobs.
INSERT INTO jobs (id, task, queue, state, priority, max_attempts, run_at, created_at, payload)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9);

-- name: insert_job_run
-- Insert a run of new jobs without options that share task, queue, state,
-- priority, max_attempts and run_at, in one statement: :items is a JSON object
-- {id: payload} (the payload's JSON text as a string, stored as a BLOB), read
-- in its order. Half the cost of binding 9 parameters per job. Tables: jobs.
INSERT INTO jobs (id, task, queue, state, priority, max_attempts, run_at, created_at, payload)
SELECT key, :task, :queue, :state, :priority, :max_attempts, :run_at, :now,
       CAST(value AS BLOB)
FROM json_each(:items);

-- name: dependency_states
-- The state of the stored jobs among :ids (JSON array): the dependencies a
-- batch names. Tables: jobs.
SELECT id, state
FROM jobs
WHERE id IN (SELECT value FROM json_each(:ids));

-- name: insert_workflow_job
-- Insert one new job that has dependencies, belongs to a workflow or has a
-- concurrency key (executemany): every column insert_job writes, plus
-- depends_on (JSON array text), on_dependency_failure, workflow_id,
-- failure_reason/finished_at for a job cancelled at once because a dependency
-- already failed, concurrency_key and rate_limit_key; fair (?24: 1 for a job of
-- a fair queue, NULL otherwise). Tables: jobs.
INSERT INTO jobs (id, task, queue, state, priority, max_attempts, timeout, ttl, run_at,
                  created_at, expires_at, idempotency_key, tenant, retry_of, payload, metadata,
                  depends_on, on_dependency_failure, workflow_id, failure_reason, finished_at,
                  concurrency_key, rate_limit_key, fair)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16,
        ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24);

-- name: add_dependencies
-- Record that blocked job ?2 waits for unfinished job ?1 (executemany).
-- Tables: job_dependencies.
INSERT OR IGNORE INTO job_dependencies (dependency_id, job_id)
VALUES (?1, ?2);

-- name: mark_has_dependents
-- Flag the jobs among :ids (JSON array) as waited for by a blocked job, so the
-- operation that finishes them resolves their dependents. Tables: jobs.
UPDATE jobs
SET has_dependents = 1
WHERE id IN (SELECT value FROM json_each(:ids)) AND has_dependents = 0;

-- name: postpone_job
-- A debounced enqueue found its key's job unstarted: ?1 payload and ?2
-- metadata replace the job's, and it is delayed until ?3, its wait's TTL
-- counted from then (executemany, in batch order: the last one of a key
-- wins). The state test holds because the whole enqueue is one write
-- transaction: no claim can start the job between the key read and this.
-- Tables: jobs.
UPDATE jobs
SET payload = ?1,
    metadata = ?2,
    state = 'delayed',
    run_at = ?3,
    expires_at = ?3 + ttl
WHERE id = ?4 AND +state IN ('waiting', 'delayed');

-- name: renew_key
-- A debounced enqueue renews the key of the job it postponed: it lives at
-- least until ?1 (executemany). Tables: idempotency_keys.
UPDATE idempotency_keys
SET expires_at = max(expires_at, ?1)
WHERE key = ?2 AND job_id = ?3;

-- name: upsert_key
-- Remember an idempotency key for a new job, replacing an expired row (executemany).
-- Tables: idempotency_keys.
INSERT INTO idempotency_keys (key, job_id, task, queue, final_state, expires_at)
VALUES (?1, ?2, ?3, ?4, NULL, ?5)
ON CONFLICT (key) DO UPDATE SET
    job_id = excluded.job_id,
    task = excluded.task,
    queue = excluded.queue,
    final_state = NULL,
    expires_at = excluded.expires_at;


-- ------------------------------------------------------------------ claim --

-- name: promote_due
-- Delayed jobs whose run_at has come become waiting (all queues). An index-only
-- no-op when nothing is due. Tables: jobs (jobs_delayed).
UPDATE jobs INDEXED BY jobs_delayed
SET state = 'waiting'
WHERE state = 'delayed' AND run_at <= :now;

-- name: expire_due
-- Waiting jobs past expires_at (all queues) fail as expired, with an Expired
-- error appended; returns them, with has_dependents (the caller resolves the
-- jobs waiting for them). An index-only no-op when nothing is due.
-- Tables: jobs (jobs_expiry).
UPDATE jobs INDEXED BY jobs_expiry
SET state = 'failed',
    failure_reason = 'expired',
    finished_at = :now,
    errors = CASE
        WHEN json_valid(errors) AND json_type(errors) = 'array'
            THEN json_insert(errors, '$[#]', json_object(
                'type', 'Expired', 'message', 'queue TTL expired', 'traceback', '',
                'attempt', attempts, 'reason', 'expired', 'at', :now))
        ELSE json_array(json_object(
                'type', 'Expired', 'message', 'queue TTL expired', 'traceback', '',
                'attempt', attempts, 'reason', 'expired', 'at', :now))
    END
WHERE state = 'waiting' AND expires_at <= :now
RETURNING
    id, task, queue, state, priority, attempts, max_attempts, timeout, run_at, created_at,
    started_at, finished_at, expires_at, ttl, lease_until, lease_token, worker_id, stalls,
    failure_reason, idempotency_key, tenant, retried_as, retry_of, cancel_requested,
    payload, metadata, result, progress, errors, depends_on, on_dependency_failure,
    workflow_id, concurrency_key, rate_limit_key, has_dependents;

-- name: open_circuits
-- Circuits that are not closed (open or half-open). Tables: circuits.
SELECT task, open_until
FROM circuits
WHERE state <> 'closed';

-- name: claim_fast
-- The fast path, one statement: claim up to :limit waiting jobs of the
-- un-paused queues in :queues (JSON array), in claim order, skipping the tasks
-- in :blocked (open circuits). Per queue, the correlated subquery walks
-- jobs_claim in order and stops after :limit rows, so a claim costs
-- O(queues x limit), never O(waiting jobs). Tables: jobs (jobs_claim), queues.
UPDATE jobs
SET state = 'active',
    attempts = attempts + 1,
    lease_until = :lease_until,
    lease_token = :token,
    worker_id = :worker_id,
    started_at = :now
WHERE rowid IN (
    SELECT j.rowid
    FROM json_each(:queues) AS q
    JOIN jobs AS j ON j.rowid IN (
        SELECT c.rowid
        FROM jobs AS c INDEXED BY jobs_claim
        WHERE c.state = 'waiting' AND c.queue = q.value AND c.run_at <= :now
          AND c.task NOT IN (SELECT value FROM json_each(:blocked))
        ORDER BY c.priority DESC, c.run_at, c.id
        LIMIT :limit)
    WHERE q.value NOT IN (SELECT name FROM queues WHERE paused = 1)
    ORDER BY j.priority DESC, j.run_at, j.id
    LIMIT :limit)
RETURNING
    id, task, queue, state, priority, attempts, max_attempts, timeout, run_at, created_at,
    started_at, finished_at, expires_at, ttl, lease_until, lease_token, worker_id, stalls,
    failure_reason, idempotency_key, tenant, retried_as, retry_of, cancel_requested,
    payload, metadata, result, progress, errors, depends_on, on_dependency_failure,
    workflow_id, concurrency_key, rate_limit_key;

-- name: claim_candidates
-- The slow path's candidates: like claim_fast's choice, but only (id, task),
-- excluding the tasks in :excluded (open circuits, exhausted caps), so the
-- caller can apply per-task caps. Tables: jobs (jobs_claim), queues.
SELECT j.id, j.task
FROM json_each(:queues) AS q
JOIN jobs AS j ON j.rowid IN (
    SELECT c.rowid
    FROM jobs AS c INDEXED BY jobs_claim
    WHERE c.state = 'waiting' AND c.queue = q.value AND c.run_at <= :now
      AND c.task NOT IN (SELECT value FROM json_each(:excluded))
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT :limit)
WHERE q.value NOT IN (SELECT name FROM queues WHERE paused = 1)
ORDER BY j.priority DESC, j.run_at, j.id
LIMIT :limit;

-- name: claim_key_candidates
-- The candidates of a claim with key_limits: like claim_candidates, with each
-- job's concurrency_key, and also leaving out the jobs of the full groups in
-- :full (a JSON array of [task, concurrency_key]; null is the keyless group),
-- so the walk passes a full group instead of stopping at it. The full groups
-- are one set, built once (json_array on both sides renders them alike); the
-- group test reads the row (the key is not in jobs_claim): this path only.
-- Tables: jobs (jobs_claim), queues.
SELECT j.id, j.task, j.concurrency_key
FROM json_each(:queues) AS q
JOIN jobs AS j ON j.rowid IN (
    SELECT c.rowid
    FROM jobs AS c INDEXED BY jobs_claim
    WHERE c.state = 'waiting' AND c.queue = q.value AND c.run_at <= :now
      AND c.task NOT IN (SELECT value FROM json_each(:excluded))
      AND json_array(c.task, c.concurrency_key) NOT IN (
          SELECT json_array(json_extract(g.value, '$[0]'), json_extract(g.value, '$[1]'))
          FROM json_each(:full) AS g)
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT :limit)
WHERE q.value NOT IN (SELECT name FROM queues WHERE paused = 1)
ORDER BY j.priority DESC, j.run_at, j.id
LIMIT :limit;

-- name: claim_rate_key_candidates
-- The candidates of a claim with key_rate_limits: like claim_key_candidates,
-- with each job's rate_limit_key too, and also leaving out the jobs of the
-- spent windows in :rate_full (a JSON array of [task, rate_limit_key]; null is
-- the keyless window), so the walk passes a spent key instead of stopping at
-- it. :full is claim_key_candidates' (an empty array without key_limits).
-- Tables: jobs (jobs_claim), queues.
SELECT j.id, j.task, j.concurrency_key, j.rate_limit_key
FROM json_each(:queues) AS q
JOIN jobs AS j ON j.rowid IN (
    SELECT c.rowid
    FROM jobs AS c INDEXED BY jobs_claim
    WHERE c.state = 'waiting' AND c.queue = q.value AND c.run_at <= :now
      AND c.task NOT IN (SELECT value FROM json_each(:excluded))
      AND json_array(c.task, c.concurrency_key) NOT IN (
          SELECT json_array(json_extract(g.value, '$[0]'), json_extract(g.value, '$[1]'))
          FROM json_each(:full) AS g)
      AND json_array(c.task, c.rate_limit_key) NOT IN (
          SELECT json_array(json_extract(g.value, '$[0]'), json_extract(g.value, '$[1]'))
          FROM json_each(:rate_full) AS g)
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT :limit)
WHERE q.value NOT IN (SELECT name FROM queues WHERE paused = 1)
ORDER BY j.priority DESC, j.run_at, j.id
LIMIT :limit;

-- name: key_slots_used
-- The slots taken, cluster-wide: active jobs per (task, concurrency_key) of
-- the tasks in :tasks (JSON array), every active job counted, whoever claimed
-- it. Keyed groups through jobs_key_active; the keyless group walks the active
-- jobs (jobs_lease). Read inside the claim's write transaction, so no other
-- claimer can change the counts before this claim commits.
-- Tables: jobs (jobs_key_active, jobs_lease).
SELECT task, concurrency_key, count(*)
FROM jobs INDEXED BY jobs_key_active
WHERE state = 'active' AND concurrency_key IS NOT NULL
  AND task IN (SELECT value FROM json_each(:tasks))
GROUP BY task, concurrency_key
UNION ALL
SELECT task, NULL, count(*)
FROM jobs INDEXED BY jobs_lease
WHERE state = 'active' AND concurrency_key IS NULL
  AND task IN (SELECT value FROM json_each(:tasks))
GROUP BY task;

-- name: fair_queues
-- The configured queues among :queues (JSON array) when one of them is fair,
-- with their pause flag, fairness, weights and virtual time; no row when none
-- is (a plain claim pays one primary-key probe per queue). Tables: queues.
SELECT name, paused, fairness, weights, vtime
FROM queues
WHERE name IN (SELECT value FROM json_each(:queues))
  AND EXISTS (
      SELECT 1 FROM queues AS f
      WHERE f.fairness IS NOT NULL AND f.name IN (SELECT value FROM json_each(:queues)));

-- name: fair_heads
-- One tenant's first :limit claimable jobs in claim order (:tenant NULL: the
-- jobs without a tenant), past the tasks in :excluded, the full key groups in
-- :full (as claim_key_candidates), the spent rate windows per key in
-- :rate_full (as claim_rate_key_candidates) and the ids this claim already
-- chose in :taken (they are claimed together at its end).
-- Tables: jobs (jobs_fair).
SELECT id, task, concurrency_key, priority, run_at, rate_limit_key
FROM jobs INDEXED BY jobs_fair
WHERE state = 'waiting' AND fair = 1 AND queue = :queue AND tenant IS :tenant
  AND run_at <= :now
  AND task NOT IN (SELECT value FROM json_each(:excluded))
  AND json_array(task, concurrency_key) NOT IN (
      SELECT json_array(json_extract(g.value, '$[0]'), json_extract(g.value, '$[1]'))
      FROM json_each(:full) AS g)
  AND json_array(task, rate_limit_key) NOT IN (
      SELECT json_array(json_extract(g.value, '$[0]'), json_extract(g.value, '$[1]'))
      FROM json_each(:rate_full) AS g)
  AND id NOT IN (SELECT value FROM json_each(:taken))
ORDER BY priority DESC, run_at, id
LIMIT :limit;

-- name: fair_heads_unfiltered
-- fair_heads when the claim has nothing to leave out (no excluded task, no
-- full key group, no spent rate window per key, nothing chosen yet from this
-- tenant). Tables: jobs (jobs_fair).
SELECT id, task, concurrency_key, priority, run_at, rate_limit_key
FROM jobs INDEXED BY jobs_fair
WHERE state = 'waiting' AND fair = 1 AND queue = :queue AND tenant IS :tenant
  AND run_at <= :now
ORDER BY priority DESC, run_at, id
LIMIT :limit;

-- name: fair_first_heads
-- The first waiting, due job of each tenant in :tenants (a JSON array; null is
-- no tenant) of a fair queue, in one statement: one index seek per tenant.
-- Tables: jobs (jobs_fair).
SELECT t.value, j.id, j.task, j.concurrency_key, j.priority, j.run_at, j.rate_limit_key
FROM json_each(:tenants) AS t
JOIN jobs AS j ON j.rowid = (
    SELECT c.rowid
    FROM jobs AS c INDEXED BY jobs_fair
    WHERE c.state = 'waiting' AND c.fair = 1 AND c.queue = :queue AND c.tenant IS t.value
      AND c.run_at <= :now
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT 1);

-- name: plain_heads
-- A plain queue's first :limit claimable jobs, for a claim that also names a
-- fair queue (the streams are merged in Python); filters as fair_heads.
-- Tables: jobs (jobs_claim).
SELECT id, task, concurrency_key, priority, run_at, rate_limit_key
FROM jobs INDEXED BY jobs_claim
WHERE state = 'waiting' AND queue = :queue AND run_at <= :now
  AND task NOT IN (SELECT value FROM json_each(:excluded))
  AND json_array(task, concurrency_key) NOT IN (
      SELECT json_array(json_extract(g.value, '$[0]'), json_extract(g.value, '$[1]'))
      FROM json_each(:full) AS g)
  AND json_array(task, rate_limit_key) NOT IN (
      SELECT json_array(json_extract(g.value, '$[0]'), json_extract(g.value, '$[1]'))
      FROM json_each(:rate_full) AS g)
  AND id NOT IN (SELECT value FROM json_each(:taken))
ORDER BY priority DESC, run_at, id
LIMIT :limit;

-- name: fair_level
-- The next :limit registered tenants of a fair queue whose pass is at or
-- below :vtime (they all stand at vtime), from tenant_key :start on, in
-- tenant_key order (the rule's tie order). Tables: fair_tenants (primary key).
SELECT tenant_key, pass
FROM fair_tenants
WHERE queue = :queue AND pass <= :vtime AND tenant_key >= :start
ORDER BY tenant_key
LIMIT :limit;

-- name: fair_ahead
-- The next :limit registered tenants of a fair queue whose pass is above
-- :vtime, after (:pass, :after), by (pass, tenant_key).
-- Tables: fair_tenants (fair_tenants_pass).
SELECT tenant_key, pass
FROM fair_tenants INDEXED BY fair_tenants_pass
WHERE queue = :queue AND pass > :vtime
  AND (pass > :pass OR (pass = :pass AND tenant_key > :after))
ORDER BY pass, tenant_key
LIMIT :limit;

-- name: fair_pass_set
-- Store the passes of the tenants a claim served, :passes a JSON object
-- {tenant_key: pass}, in one statement driven by the object (an upsert: one
-- primary-key seek per tenant; the rows exist). Tables: fair_tenants.
INSERT INTO fair_tenants (queue, tenant_key, pass)
SELECT :queue, key, value FROM json_each(:passes) WHERE true
ON CONFLICT (queue, tenant_key) DO UPDATE SET pass = excluded.pass;

-- name: fair_tenant_waits
-- Whether a tenant has any waiting job in the queue (claimable or not).
-- Tables: jobs (jobs_fair).
SELECT EXISTS (
    SELECT 1 FROM jobs INDEXED BY jobs_fair
    WHERE state = 'waiting' AND fair = 1 AND queue = :queue AND tenant IS :tenant);

-- name: fair_tenant_drop
-- Forget a tenant with nothing waiting whose pass the rule would clamp to
-- vtime anyway; a job of it that waits again registers it anew (triggers).
-- Tables: fair_tenants.
DELETE FROM fair_tenants WHERE queue = :queue AND tenant_key = :key AND pass <= :vtime;

-- name: queue_fairness
-- Whether a queue is configured fair (no row: not configured). Tables: queues.
SELECT fairness IS NOT NULL FROM queues WHERE name = :name;

-- name: mark_queue_fair
-- A queue turned fair (:fair 1) or plain (:fair NULL): every job of it, in any
-- state, carries the flag (a finished one may wait again: a retry copies it,
-- a resumed dependent keeps it). A full pass over the jobs, only when the
-- queue's fairness changes. Tables: jobs.
UPDATE jobs SET fair = :fair WHERE queue = :name AND fair IS NOT :fair;

-- name: fair_tenants_fill
-- A queue made fair: register the tenants of its waiting jobs (passes of the
-- tenants already registered are kept). Tables: jobs (jobs_fair), fair_tenants.
INSERT OR IGNORE INTO fair_tenants (queue, tenant_key)
SELECT DISTINCT queue, ifnull('=' || tenant, '')
FROM jobs INDEXED BY jobs_fair
WHERE state = 'waiting' AND fair = 1 AND queue = :name;

-- name: fair_tenants_clear
-- A queue made plain: its tenants' passes go. Tables: fair_tenants.
DELETE FROM fair_tenants WHERE queue = :name;

-- name: fair_vtime
-- Store a fair queue's virtual time. Tables: queues.
UPDATE queues SET vtime = :vtime WHERE name = :queue;

-- name: claim_ids
-- The slow path's claim of the chosen :ids (JSON array). Tables: jobs.
UPDATE jobs
SET state = 'active',
    attempts = attempts + 1,
    lease_until = :lease_until,
    lease_token = :token,
    worker_id = :worker_id,
    started_at = :now
WHERE id IN (SELECT value FROM json_each(:ids)) AND +state = 'waiting'
RETURNING
    id, task, queue, state, priority, attempts, max_attempts, timeout, run_at, created_at,
    started_at, finished_at, expires_at, ttl, lease_until, lease_token, worker_id, stalls,
    failure_reason, idempotency_key, tenant, retried_as, retry_of, cancel_requested,
    payload, metadata, result, progress, errors, depends_on, on_dependency_failure,
    workflow_id, concurrency_key, rate_limit_key;

-- name: rate_trim
-- Forget one task's starts that left its window (at <= :since). Tables: rate_starts.
DELETE FROM rate_starts
WHERE task = :task AND at <= :since;

-- name: rate_used
-- Starts of one task inside its sliding window (at > :since). Tables: rate_starts.
SELECT coalesce(sum(n), 0)
FROM rate_starts
WHERE task = :task AND at > :since;

-- name: rate_record
-- Log :n starts of a task at :at (executemany). Tables: rate_starts.
INSERT INTO rate_starts (task, at, n, period)
VALUES (?1, ?2, ?3, ?4);

-- name: rate_key_trim
-- Forget the starts of :task's key windows that left them (at <= :since).
-- Tables: rate_key_starts (rate_key_starts_window).
DELETE FROM rate_key_starts
WHERE task = :task AND at <= :since;

-- name: rate_key_used
-- Starts in the window of (:task, :key) (at > :since; a NULL key is the
-- keyless window). Tables: rate_key_starts (rate_key_starts_window).
SELECT coalesce(sum(n), 0)
FROM rate_key_starts
WHERE task = :task AND rate_key IS :key AND at > :since;

-- name: rate_key_record
-- Log ?4 starts in the window (?1 task, ?2 rate_key) at ?3, kept ?5 seconds
-- (executemany). Tables: rate_key_starts.
INSERT INTO rate_key_starts (task, rate_key, at, n, period)
VALUES (?1, ?2, ?3, ?4, ?5);

-- name: circuit_trial
-- A trial job was claimed for an open circuit: half-open until now + open_for,
-- so a lost trial is retried later (executemany). Tables: circuits.
UPDATE circuits
SET state = 'half_open',
    open_until = ?1 + coalesce(open_for, 0)
WHERE task = ?2;


-- ------------------------------------------------- renew, settle, progress --

-- name: leases_of
-- Current lease of the active jobs among :ids (JSON array), and whether a
-- blocked job waits for them (has_dependents). Tables: jobs.
SELECT id, lease_token, cancel_requested, queue, has_dependents
FROM jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND +state = 'active';

-- name: renew_lease
-- Extend one lease, fenced by its token (executemany). Tables: jobs (jobs_lease).
UPDATE jobs
SET lease_until = ?1
WHERE id = ?2 AND lease_token = ?3 AND state = 'active';

-- name: save_progress
-- Store one job's progress, fenced by its token (executemany). Tables: jobs.
UPDATE jobs
SET progress = ?1
WHERE id = ?2 AND lease_token = ?3 AND state = 'active';

-- name: settle_job
-- Apply one run's outcome, fenced by its token (executemany). ?1 new state,
-- ?2 result, ?3 failure reason, ?4 error JSON to append, ?5 new run_at,
-- ?6 attempts to give back, ?7 finished_at, ?8 clear worker_id, ?9 progress,
-- ?10 id, ?11 lease token, ?12 when the job's next wait starts (retry and a
-- release with a delay: its new run_at; release: now; NULL: it does not wait
-- again): each wait gets the whole
-- TTL, expires_at = ?12 + ttl. A stored error history that is not a JSON array
-- is replaced rather than failing the batch. Tables: jobs.
UPDATE jobs
SET state = ?1,
    result = coalesce(?2, result),
    failure_reason = ?3,
    errors = CASE
        WHEN ?4 IS NULL THEN errors
        WHEN json_valid(errors) AND json_type(errors) = 'array'
            THEN json_insert(errors, '$[#]', json(?4))
        ELSE json_array(json(?4))
    END,
    run_at = coalesce(?5, run_at),
    attempts = max(attempts - ?6, 0),
    finished_at = ?7,
    worker_id = CASE WHEN ?8 THEN NULL ELSE worker_id END,
    progress = coalesce(?9, progress),
    expires_at = CASE WHEN ?12 IS NULL THEN expires_at ELSE ?12 + ttl END,
    lease_until = NULL,
    lease_token = NULL
WHERE id = ?10 AND lease_token = ?11 AND state = 'active';

-- name: complete_jobs
-- The common outcome in one statement: complete every job of :items (a JSON
-- array of [id, lease_token, result, progress]; result and progress are JSON
-- text or null) that is active under that token. No RETURNING (each returned
-- row costs more than its update): the caller compares the change count with
-- the batch and, when some were refused, rolls back and settles exactly. A job
-- that blocked jobs wait for (has_dependents) is left to the exact path too,
-- which resolves its dependents. Tables: jobs.
UPDATE jobs
SET state = 'completed',
    result = coalesce(s.result, jobs.result),
    failure_reason = NULL,
    finished_at = :now,
    progress = coalesce(s.progress, jobs.progress),
    lease_until = NULL,
    lease_token = NULL
FROM (SELECT json_extract(value, '$[0]') AS id,
             json_extract(value, '$[1]') AS token,
             CAST(json_extract(value, '$[2]') AS BLOB) AS result,
             CAST(json_extract(value, '$[3]') AS BLOB) AS progress
      FROM json_each(:items)) AS s
WHERE jobs.id = s.id AND jobs.lease_token = s.token AND jobs.state = 'active'
  AND jobs.has_dependents = 0;

-- name: circuits_of
-- The circuits of the tasks in :tasks (JSON array). Tables: circuits.
SELECT task, state, failures, open_for, open_until
FROM circuits
WHERE task IN (SELECT value FROM json_each(:tasks));

-- name: upsert_circuit
-- Write one circuit (executemany). Tables: circuits.
INSERT INTO circuits (task, state, failures, open_for, open_until)
VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (task) DO UPDATE SET
    state = excluded.state,
    failures = excluded.failures,
    open_for = excluded.open_for,
    open_until = excluded.open_until;


-- ------------------------------------------------------------ waiting --

-- name: data_version
-- Changes whenever another connection (any process) commits. No table read.
PRAGMA data_version;

-- name: next_due
-- When the next delayed job of :queues (JSON array) becomes due. Walks
-- jobs_delayed in run_at order and stops at the first match. Tables: jobs.
SELECT run_at
FROM jobs INDEXED BY jobs_delayed
WHERE state = 'delayed' AND queue IN (SELECT value FROM json_each(:queues))
ORDER BY run_at
LIMIT 1;


-- ---------------------------------------------------------------- reads --

-- name: jobs_by_ids
-- The jobs among :ids (JSON array). Tables: jobs.
SELECT
    id, task, queue, state, priority, attempts, max_attempts, timeout, run_at, created_at,
    started_at, finished_at, expires_at, ttl, lease_until, lease_token, worker_id, stalls,
    failure_reason, idempotency_key, tenant, retried_as, retry_of, cancel_requested,
    payload, metadata, result, progress, errors, depends_on, on_dependency_failure,
    workflow_id, concurrency_key, rate_limit_key
FROM jobs
WHERE id IN (SELECT value FROM json_each(:ids));

-- name: list_jobs
-- Jobs matching a JobFilter (a NULL parameter matches everything), newest
-- first, paged. Tables: jobs.
SELECT
    id, task, queue, state, priority, attempts, max_attempts, timeout, run_at, created_at,
    started_at, finished_at, expires_at, ttl, lease_until, lease_token, worker_id, stalls,
    failure_reason, idempotency_key, tenant, retried_as, retry_of, cancel_requested,
    payload, metadata, result, progress, errors, depends_on, on_dependency_failure,
    workflow_id, concurrency_key, rate_limit_key
FROM jobs
WHERE (:states IS NULL OR state IN (SELECT value FROM json_each(:states)))
  AND (:queue IS NULL OR queue = :queue)
  AND (:task IS NULL OR task = :task)
  AND (:tenant IS NULL OR tenant = :tenant)
  AND (:failure_reason IS NULL OR failure_reason = :failure_reason)
  AND (:idempotency_key IS NULL OR idempotency_key = :idempotency_key)
  AND (:finished_before IS NULL OR finished_at < :finished_before)
  AND (:workflow_id IS NULL OR workflow_id = :workflow_id)
ORDER BY id DESC
LIMIT :limit OFFSET :offset;

-- name: list_workflow_jobs
-- Like list_jobs, for a JobFilter with a workflow_id: that workflow's rows
-- only, newest first, through jobs_workflow. Tables: jobs (jobs_workflow).
SELECT
    id, task, queue, state, priority, attempts, max_attempts, timeout, run_at, created_at,
    started_at, finished_at, expires_at, ttl, lease_until, lease_token, worker_id, stalls,
    failure_reason, idempotency_key, tenant, retried_as, retry_of, cancel_requested,
    payload, metadata, result, progress, errors, depends_on, on_dependency_failure,
    workflow_id, concurrency_key, rate_limit_key
FROM jobs INDEXED BY jobs_workflow
WHERE workflow_id = :workflow_id
  AND (:states IS NULL OR state IN (SELECT value FROM json_each(:states)))
  AND (:queue IS NULL OR queue = :queue)
  AND (:task IS NULL OR task = :task)
  AND (:tenant IS NULL OR tenant = :tenant)
  AND (:failure_reason IS NULL OR failure_reason = :failure_reason)
  AND (:idempotency_key IS NULL OR idempotency_key = :idempotency_key)
  AND (:finished_before IS NULL OR finished_at < :finished_before)
ORDER BY id DESC
LIMIT :limit OFFSET :offset;

-- name: count_workflow_jobs
-- Like count_jobs, for a JobFilter with a workflow_id. Tables: jobs (jobs_workflow).
SELECT count(*)
FROM jobs INDEXED BY jobs_workflow
WHERE workflow_id = :workflow_id
  AND (:states IS NULL OR state IN (SELECT value FROM json_each(:states)))
  AND (:queue IS NULL OR queue = :queue)
  AND (:task IS NULL OR task = :task)
  AND (:tenant IS NULL OR tenant = :tenant)
  AND (:failure_reason IS NULL OR failure_reason = :failure_reason)
  AND (:idempotency_key IS NULL OR idempotency_key = :idempotency_key)
  AND (:finished_before IS NULL OR finished_at < :finished_before);

-- name: list_rare_finished
-- Like list_jobs, for :states (JSON array) that are failed/cancelled only (the
-- dead-letter queue): reads those few rows through jobs_finished instead of
-- walking every job newest first. Tables: jobs (jobs_finished).
SELECT
    id, task, queue, state, priority, attempts, max_attempts, timeout, run_at, created_at,
    started_at, finished_at, expires_at, ttl, lease_until, lease_token, worker_id, stalls,
    failure_reason, idempotency_key, tenant, retried_as, retry_of, cancel_requested,
    payload, metadata, result, progress, errors, depends_on, on_dependency_failure,
    workflow_id, concurrency_key, rate_limit_key
FROM jobs INDEXED BY jobs_finished
WHERE state IN (SELECT value FROM json_each(:states)) AND finished_at IS NOT NULL
  AND (:queue IS NULL OR queue = :queue)
  AND (:task IS NULL OR task = :task)
  AND (:tenant IS NULL OR tenant = :tenant)
  AND (:failure_reason IS NULL OR failure_reason = :failure_reason)
  AND (:idempotency_key IS NULL OR idempotency_key = :idempotency_key)
  AND (:finished_before IS NULL OR finished_at < :finished_before)
  AND (:workflow_id IS NULL OR workflow_id = :workflow_id)
ORDER BY id DESC
LIMIT :limit OFFSET :offset;

-- name: count_rare_finished
-- Like count_jobs, for failed/cancelled :states only. Tables: jobs (jobs_finished).
SELECT count(*)
FROM jobs INDEXED BY jobs_finished
WHERE state IN (SELECT value FROM json_each(:states)) AND finished_at IS NOT NULL
  AND (:queue IS NULL OR queue = :queue)
  AND (:task IS NULL OR task = :task)
  AND (:tenant IS NULL OR tenant = :tenant)
  AND (:failure_reason IS NULL OR failure_reason = :failure_reason)
  AND (:idempotency_key IS NULL OR idempotency_key = :idempotency_key)
  AND (:finished_before IS NULL OR finished_at < :finished_before)
  AND (:workflow_id IS NULL OR workflow_id = :workflow_id);

-- name: count_jobs
-- How many jobs match a JobFilter (a NULL parameter matches everything). Tables: jobs.
SELECT count(*)
FROM jobs
WHERE (:states IS NULL OR state IN (SELECT value FROM json_each(:states)))
  AND (:queue IS NULL OR queue = :queue)
  AND (:task IS NULL OR task = :task)
  AND (:tenant IS NULL OR tenant = :tenant)
  AND (:failure_reason IS NULL OR failure_reason = :failure_reason)
  AND (:idempotency_key IS NULL OR idempotency_key = :idempotency_key)
  AND (:finished_before IS NULL OR finished_at < :finished_before)
  AND (:workflow_id IS NULL OR workflow_id = :workflow_id);

-- name: count_waiting
-- How many jobs are waiting. Tables: jobs (jobs_claim, index-only).
SELECT count(*)
FROM jobs INDEXED BY jobs_claim
WHERE state = 'waiting';

-- name: count_delayed
-- How many jobs are delayed. Tables: jobs (jobs_delayed, index-only).
SELECT count(*)
FROM jobs INDEXED BY jobs_delayed
WHERE state = 'delayed';

-- name: count_active
-- How many jobs are active. Tables: jobs (jobs_lease, index-only).
SELECT count(*)
FROM jobs INDEXED BY jobs_lease
WHERE state = 'active';

-- name: count_blocked
-- How many jobs are blocked. Tables: jobs (jobs_blocked, index-only).
SELECT count(*)
FROM jobs INDEXED BY jobs_blocked
WHERE state = 'blocked';

-- name: count_finished
-- How many jobs are in terminal :state (the dead-letter count). Tables: jobs
-- (jobs_finished, index-only).
SELECT count(*)
FROM jobs INDEXED BY jobs_finished
WHERE state = :state AND finished_at IS NOT NULL;

-- name: counts_by_queue
-- Jobs per queue and state, each state read from its own partial index
-- (index-only; finished_at is set exactly on terminal jobs). Tables: jobs.
SELECT queue, 'waiting', count(*)
FROM jobs INDEXED BY jobs_claim
WHERE state = 'waiting'
GROUP BY queue
UNION ALL
SELECT queue, 'delayed', count(*)
FROM jobs INDEXED BY jobs_delayed
WHERE state = 'delayed'
GROUP BY queue
UNION ALL
SELECT queue, 'active', count(*)
FROM jobs INDEXED BY jobs_lease
WHERE state = 'active'
GROUP BY queue
UNION ALL
SELECT queue, 'blocked', count(*)
FROM jobs INDEXED BY jobs_blocked
WHERE state = 'blocked'
GROUP BY queue
UNION ALL
SELECT queue, state, count(*)
FROM jobs INDEXED BY jobs_finished
WHERE finished_at IS NOT NULL AND state IN ('completed', 'failed', 'cancelled')
GROUP BY state, queue;

-- name: queue_rows
-- Every configured queue. Tables: queues.
SELECT name, paused, max_size, ttl, fairness, weights
FROM queues
ORDER BY name;

-- name: oldest_waiting
-- Per queue, the run_at of its oldest due waiting job. Tables: jobs (jobs_claim).
SELECT queue, min(run_at)
FROM jobs INDEXED BY jobs_claim
WHERE state = 'waiting' AND run_at <= :now
GROUP BY queue;

-- name: cancel_requested_of
-- Which of the active jobs among :ids (JSON array) have a cancel request. Tables: jobs.
SELECT id
FROM jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND +state = 'active' AND cancel_requested = 1;


-- ----------------------------------------------------------- dependencies --
-- Run, in its own transaction, by every operation that finishes a job with
-- has_dependents (see dependencies.py): cancel_dependents (only when one of
-- them failed or was cancelled), then take_dependents, then release_dependents.

-- name: cancel_dependents
-- The blocked jobs with policy 'cancel' that wait for one of :failed (JSON
-- array of ids of jobs that just failed or were cancelled), and transitively
-- the blocked 'cancel' jobs waiting for those, end cancelled with reason
-- dependency_failed. The recursive CTE walks a chain of any length in this one
-- statement (UNION: each job once). Returns their ids.
-- Tables: jobs, job_dependencies.
WITH RECURSIVE doomed(id) AS (
    SELECT e.job_id
    FROM job_dependencies AS e
    JOIN jobs AS j ON j.id = e.job_id
    WHERE e.dependency_id IN (SELECT value FROM json_each(:failed))
      AND +j.state = 'blocked' AND j.on_dependency_failure = 'cancel'
    UNION
    SELECT e.job_id
    FROM doomed AS d
    JOIN job_dependencies AS e ON e.dependency_id = d.id
    JOIN jobs AS j ON j.id = e.job_id
    WHERE +j.state = 'blocked' AND j.on_dependency_failure = 'cancel'
)
UPDATE jobs
SET state = 'cancelled',
    failure_reason = 'dependency_failed',
    finished_at = :now
WHERE id IN (SELECT id FROM doomed) AND +state = 'blocked'
RETURNING id;

-- name: take_dependents
-- The jobs :ids (JSON array) have finished: delete the rows of the jobs
-- waiting for them and return those jobs' ids (the candidates for release).
-- Tables: job_dependencies.
DELETE FROM job_dependencies
WHERE dependency_id IN (SELECT value FROM json_each(:ids))
RETURNING job_id;

-- name: release_dependents
-- The blocked jobs among :ids (JSON array) that wait for nothing any more (no
-- job_dependencies row left) become waiting, or delayed while their run_at is
-- ahead: run_at = max(run_at, :now), and the wait gets its whole TTL. Returns
-- their queues and states. Tables: jobs, job_dependencies.
UPDATE jobs
SET state = CASE WHEN run_at > :now THEN 'delayed' ELSE 'waiting' END,
    run_at = max(run_at, :now),
    expires_at = max(run_at, :now) + ttl
WHERE id IN (SELECT value FROM json_each(:ids)) AND +state = 'blocked'
  AND NOT EXISTS (SELECT 1 FROM job_dependencies AS e WHERE e.job_id = jobs.id)
RETURNING queue, state;


-- ------------------------------------------------------- acting on jobs --

-- name: cancel_job
-- Waiting/delayed/blocked: cancelled now; active: flag cancel_requested.
-- Returns the job when it changed, and has_dependents (the caller resolves
-- the jobs waiting for it). Tables: jobs.
UPDATE jobs
SET state = CASE WHEN state = 'active' THEN state ELSE 'cancelled' END,
    finished_at = CASE WHEN state = 'active' THEN finished_at ELSE :now END,
    cancel_requested = CASE WHEN state = 'active' THEN 1 ELSE cancel_requested END
WHERE id = :id AND state IN ('waiting', 'delayed', 'blocked', 'active')
RETURNING
    id, task, queue, state, priority, attempts, max_attempts, timeout, run_at, created_at,
    started_at, finished_at, expires_at, ttl, lease_until, lease_token, worker_id, stalls,
    failure_reason, idempotency_key, tenant, retried_as, retry_of, cancel_requested,
    payload, metadata, result, progress, errors, depends_on, on_dependency_failure,
    workflow_id, concurrency_key, rate_limit_key, has_dependents;

-- name: retry_target
-- One job's state and the job it was already retried as. Tables: jobs.
SELECT state, retried_as
FROM jobs
WHERE id = :id;

-- name: insert_retry_copy
-- Copy failed job :id into a new waiting job :new_id with fresh attempts and
-- no idempotency key; it keeps the effective TTL, counted from :now, its
-- place in a workflow (depends_on, on_dependency_failure, workflow_id) and its
-- concurrency_key (it still counts in its group's cap) and rate_limit_key;
-- fair, which every job of a queue has as the queue is. Tables: jobs.
INSERT INTO jobs (id, task, queue, state, priority, max_attempts, timeout, ttl, run_at,
                  created_at, expires_at, tenant, retry_of, payload, metadata,
                  depends_on, on_dependency_failure, workflow_id, concurrency_key,
                  rate_limit_key, fair)
SELECT :new_id, task, queue, 'waiting', priority, max_attempts, timeout, ttl, :now, :now,
       :now + ttl, tenant, id, payload, metadata, depends_on, on_dependency_failure, workflow_id,
       concurrency_key, rate_limit_key, fair
FROM jobs
WHERE id = :id;

-- name: cancelled_dependents
-- The jobs cancelled dependency_failed that depend on one of :ids (JSON
-- array), with their depends_on: what a dead-letter retry may resume. Through
-- jobs_finished (cancelled jobs only). Tables: jobs.
SELECT id, depends_on
FROM jobs
WHERE state = 'cancelled' AND finished_at IS NOT NULL AND failure_reason = 'dependency_failed'
  AND EXISTS (SELECT 1 FROM json_each(jobs.depends_on) AS d
              WHERE d.value IN (SELECT value FROM json_each(:ids)));

-- name: resume_dependent
-- A cancelled dependent of a retried job waits again (executemany): blocked,
-- ?2 its depends_on (JSON array) with the copy in place of the original.
-- Tables: jobs.
UPDATE jobs
SET state = 'blocked', failure_reason = NULL, finished_at = NULL, depends_on = ?2
WHERE id = ?1 AND +state = 'cancelled';

-- name: mark_retried
-- The original failed job points at its retry. Tables: jobs.
UPDATE jobs
SET retried_as = :new_id
WHERE id = :id;

-- name: delete_jobs
-- Delete the jobs among :ids (JSON array) that are not active; returns what
-- idempotency keys need. Tables: jobs.
DELETE FROM jobs
WHERE id IN (SELECT value FROM json_each(:ids)) AND state <> 'active'
RETURNING idempotency_key, id, state;

-- name: purge_jobs
-- Delete up to :chunk non-active jobs matching a JobFilter (NULL matches
-- everything); returns what idempotency keys need. Tables: jobs.
DELETE FROM jobs
WHERE rowid IN (
    SELECT rowid
    FROM jobs
    WHERE state <> 'active'
      AND (:states IS NULL OR state IN (SELECT value FROM json_each(:states)))
      AND (:queue IS NULL OR queue = :queue)
      AND (:task IS NULL OR task = :task)
      AND (:tenant IS NULL OR tenant = :tenant)
      AND (:failure_reason IS NULL OR failure_reason = :failure_reason)
      AND (:idempotency_key IS NULL OR idempotency_key = :idempotency_key)
      AND (:finished_before IS NULL OR finished_at < :finished_before)
      AND (:workflow_id IS NULL OR workflow_id = :workflow_id)
    LIMIT :chunk)
RETURNING idempotency_key, id, state;

-- name: remember_final_state
-- A keyed job's row is being deleted: its key remembers how it ended
-- (executemany). Tables: idempotency_keys.
UPDATE idempotency_keys
SET final_state = ?1
WHERE key = ?2 AND job_id = ?3;


-- ------------------------------------------------------------ maintenance --

-- name: recover_stalled
-- Active jobs whose lease ended before :now: back to waiting with stalls + 1
-- and a fresh TTL (expires_at = :now + ttl), or failed/stalled when no attempt
-- or stall is left, or cancelled when a cancel was requested (it wins); a
-- Stalled error is appended either way. Returns them, with has_dependents (the
-- caller resolves the jobs waiting for the ones that ended). Every SET
-- expression reads the row as it was. Tables: jobs (jobs_lease).
UPDATE jobs INDEXED BY jobs_lease
SET state = CASE WHEN cancel_requested THEN 'cancelled'
                 WHEN attempts >= max_attempts OR stalls + 1 > :max_stalled THEN 'failed'
                 ELSE 'waiting' END,
    failure_reason = CASE WHEN cancel_requested THEN failure_reason
                          WHEN attempts >= max_attempts OR stalls + 1 > :max_stalled
                          THEN 'stalled' ELSE failure_reason END,
    finished_at = CASE WHEN cancel_requested OR attempts >= max_attempts
                            OR stalls + 1 > :max_stalled
                       THEN :now ELSE finished_at END,
    worker_id = CASE WHEN cancel_requested OR attempts >= max_attempts
                          OR stalls + 1 > :max_stalled
                     THEN worker_id ELSE NULL END,
    expires_at = CASE WHEN cancel_requested OR attempts >= max_attempts
                           OR stalls + 1 > :max_stalled
                      THEN expires_at ELSE :now + ttl END,
    stalls = stalls + 1,
    lease_until = NULL,
    lease_token = NULL,
    errors = CASE
        WHEN json_valid(errors) AND json_type(errors) = 'array'
            THEN json_insert(errors, '$[#]', json_object(
                'type', 'Stalled', 'message', 'lease expired: the worker stopped renewing it',
                'traceback', '', 'attempt', attempts, 'reason', 'stalled', 'at', :now))
        ELSE json_array(json_object(
                'type', 'Stalled', 'message', 'lease expired: the worker stopped renewing it',
                'traceback', '', 'attempt', attempts, 'reason', 'stalled', 'at', :now))
    END
WHERE state = 'active' AND lease_until < :now
RETURNING
    id, task, queue, state, priority, attempts, max_attempts, timeout, run_at, created_at,
    started_at, finished_at, expires_at, ttl, lease_until, lease_token, worker_id, stalls,
    failure_reason, idempotency_key, tenant, retried_as, retry_of, cancel_requested,
    payload, metadata, result, progress, errors, depends_on, on_dependency_failure,
    workflow_id, concurrency_key, rate_limit_key, has_dependents;

-- name: prune_by_age
-- Delete up to :chunk plain jobs (no workflow: prune_workflows) in :state
-- finished before :before, of :task (NULL = any) and not of the tasks in
-- :exclude (JSON array). Tables: jobs (jobs_finished).
DELETE FROM jobs
WHERE rowid IN (
    SELECT rowid
    FROM jobs
    WHERE state = :state AND finished_at < :before
      AND (:task IS NULL OR task = :task)
      AND task NOT IN (SELECT value FROM json_each(:exclude))
      AND workflow_id IS NULL
    LIMIT :chunk)
RETURNING idempotency_key, id, state;

-- name: prune_by_count
-- Delete up to :chunk plain jobs in :state beyond the :keep newest by
-- finished_at (workflow jobs count among the newest, but are left to
-- prune_workflows), same task filters as prune_by_age. Tables: jobs (jobs_finished).
DELETE FROM jobs
WHERE rowid IN (
    SELECT rowid
    FROM (
        SELECT rowid, workflow_id
        FROM jobs
        WHERE state = :state AND finished_at IS NOT NULL
          AND (:task IS NULL OR task = :task)
          AND task NOT IN (SELECT value FROM json_each(:exclude))
        ORDER BY finished_at DESC, id DESC
        LIMIT -1 OFFSET :keep)
    WHERE workflow_id IS NULL
    LIMIT :chunk)
RETURNING idempotency_key, id, state;

-- name: count_threshold
-- The :keep-th newest job (finished_at, id) in :state, same task filters as
-- prune_by_count; nothing when there are fewer. Tables: jobs (jobs_finished).
SELECT finished_at, id
FROM jobs
WHERE state = :state AND finished_at IS NOT NULL
  AND (:task IS NULL OR task = :task)
  AND task NOT IN (SELECT value FROM json_each(:exclude))
ORDER BY finished_at DESC, id DESC
LIMIT 1 OFFSET :keep - 1;

-- name: finished_workflows
-- The workflows none of whose jobs is live. Tables: jobs (jobs_workflow: the
-- workflow jobs only, already grouped).
SELECT workflow_id
FROM jobs
WHERE workflow_id IS NOT NULL
GROUP BY workflow_id
HAVING sum(state NOT IN ('completed', 'failed', 'cancelled')) = 0;

-- name: workflow_rows
-- Every job of the workflows in :ids (JSON array). Tables: jobs (jobs_workflow).
SELECT workflow_id, id, state, task, finished_at
FROM jobs
WHERE workflow_id IN (SELECT value FROM json_each(:ids));

-- name: delete_workflows
-- Delete every job of the workflows in :ids (JSON array). Tables: jobs (jobs_workflow).
DELETE FROM jobs
WHERE workflow_id IN (SELECT value FROM json_each(:ids))
RETURNING idempotency_key, id, state;

-- name: prune_keys
-- Drop idempotency keys past their expiry. Tables: idempotency_keys.
DELETE FROM idempotency_keys
WHERE expires_at <= :now;

-- name: prune_rate_starts
-- Drop rate-limit starts older than their window. Tables: rate_starts.
DELETE FROM rate_starts
WHERE at <= :now - period;

-- name: prune_rate_key_starts
-- Drop per-key rate-limit starts older than their window. Tables: rate_key_starts.
DELETE FROM rate_key_starts
WHERE at <= :now - period;


-- ------------------------------------------------------------------ queues --

-- name: configure_queue
-- Create or update a queue's options, keeping its paused flag and its fair
-- state (vtime, passes). Tables: queues.
INSERT INTO queues (name, max_size, ttl, fairness, weights)
VALUES (:name, :max_size, :ttl, :fairness, :weights)
ON CONFLICT (name) DO UPDATE SET
    max_size = excluded.max_size,
    ttl = excluded.ttl,
    fairness = excluded.fairness,
    weights = excluded.weights;

-- name: tenant_counts
-- Waiting (+ delayed) and active jobs per tenant of one queue, most waiting
-- first, the None tenant first among equals: each state from its own partial
-- index (waiting index-only), never the finished jobs. Tables: jobs.
SELECT tenant, sum(waiting) AS waiting, sum(active) AS active
FROM (
    SELECT tenant, count(*) AS waiting, 0 AS active
    FROM jobs INDEXED BY jobs_fair
    WHERE state = 'waiting' AND fair = 1 AND queue = :queue
    GROUP BY tenant
    UNION ALL
    SELECT tenant, count(*), 0
    FROM jobs INDEXED BY jobs_claim
    WHERE state = 'waiting' AND queue = :queue AND fair IS NULL
    GROUP BY tenant
    UNION ALL
    SELECT tenant, count(*), 0
    FROM jobs INDEXED BY jobs_delayed
    WHERE state = 'delayed' AND queue = :queue
    GROUP BY tenant
    UNION ALL
    SELECT tenant, 0, count(*)
    FROM jobs INDEXED BY jobs_lease
    WHERE state = 'active' AND queue = :queue
    GROUP BY tenant)
GROUP BY tenant
ORDER BY waiting DESC, active DESC, tenant IS NOT NULL, tenant
LIMIT :limit;

-- name: set_queue_paused
-- Pause or resume a queue, creating its row when needed. Tables: queues.
INSERT INTO queues (name, paused)
VALUES (:name, :paused)
ON CONFLICT (name) DO UPDATE SET
    paused = excluded.paused;

-- name: undispatch_queue
-- A resumed queue's waiting jobs lose their dispatch record, so a RabbitMQ
-- relay publishes them again: a message delivered while the queue was paused
-- claimed nothing and was acknowledged. Changes no row where nothing was
-- dispatched (a store without dispatch). Tables: jobs (jobs_claim).
UPDATE jobs SET dispatched_at = NULL
WHERE queue = :name AND state = 'waiting' AND dispatched_at IS NOT NULL;


-- ---------------------------------------------------------------- circuits --

-- name: list_circuits
-- Every circuit with a row. Tables: circuits.
SELECT task, state, failures, open_until
FROM circuits
ORDER BY task;

-- name: reset_circuit
-- Close a circuit and forget its failures. Tables: circuits.
UPDATE circuits
SET state = 'closed',
    failures = 0,
    open_until = NULL
WHERE task = :task;

-- name: clear_circuit_failures
-- Forget the failures of closed circuits: of :task, or of every task when it
-- is NULL. Open and half-open circuits keep theirs. Tables: circuits.
UPDATE circuits
SET failures = 0
WHERE state = 'closed'
  AND failures > 0
  AND (:task IS NULL OR task = :task);


-- -------------------------------------------------------------- heartbeats --

-- name: record_heartbeat
-- Upsert a worker; last_seen is the backend's now. Tables: workers.
INSERT INTO workers (id, info, last_seen, heartbeat_interval)
VALUES (:id, :info, :now, :heartbeat_interval)
ON CONFLICT (id) DO UPDATE SET
    info = excluded.info,
    last_seen = excluded.last_seen,
    heartbeat_interval = excluded.heartbeat_interval;

-- name: list_workers
-- Every worker that sent a heartbeat. Tables: workers.
SELECT id, info, last_seen, heartbeat_interval
FROM workers
ORDER BY id;

-- name: remove_worker
-- Forget a worker. Tables: workers.
DELETE FROM workers
WHERE id = :id;

-- name: prune_workers
-- Forget the workers last seen before :before. Tables: workers.
DELETE FROM workers
WHERE last_seen < :before;


-- ------------------------------------------------------------------ misc --

-- name: ping
-- A round trip that reads nothing.
SELECT 1;

-- name: key_counts
-- Active and waiting jobs per (task, concurrency_key), most active first
-- (ties: most waiting, task, key with NULL first), :limit groups. Keyed active
-- jobs from jobs_key_active (index-only), the keyless active jobs of the
-- :tasks (JSON array) from jobs_lease, waiting jobs of :tasks from one pass
-- over the waiting rows (no index keys them by concurrency key). Tables: jobs.
SELECT task, concurrency_key, sum(active) AS active, sum(waiting) AS waiting
FROM (
    SELECT task, concurrency_key, count(*) AS active, 0 AS waiting
    FROM jobs INDEXED BY jobs_key_active
    WHERE state = 'active' AND concurrency_key IS NOT NULL
    GROUP BY task, concurrency_key
    UNION ALL
    SELECT task, NULL, count(*), 0
    FROM jobs INDEXED BY jobs_lease
    WHERE state = 'active' AND concurrency_key IS NULL
      AND task IN (SELECT value FROM json_each(:tasks))
    GROUP BY task
    UNION ALL
    SELECT task, concurrency_key, 0, count(*)
    FROM jobs INDEXED BY jobs_claim
    WHERE state = 'waiting' AND task IN (SELECT value FROM json_each(:tasks))
    GROUP BY task, concurrency_key)
GROUP BY task, concurrency_key
ORDER BY sum(active) DESC, sum(waiting) DESC, task, concurrency_key
LIMIT :limit;

-- name: rate_key_usage
-- Starts per (task, rate_key) window in (:now - period, :now], for the tasks
-- and periods of :rates (JSON array of [task, period]), most starts first
-- (ties: task, key with NULL first), :limit windows. Reads the log of each
-- task through rate_key_starts_window, never trims it. Tables: rate_key_starts.
SELECT s.task, s.rate_key, sum(s.n) AS used
FROM rate_key_starts AS s
JOIN (SELECT json_extract(value, '$[0]') AS task, json_extract(value, '$[1]') AS period
      FROM json_each(:rates)) AS r ON s.task = r.task
WHERE s.at > :now - r.period
GROUP BY s.task, s.rate_key
ORDER BY used DESC, s.task, s.rate_key
LIMIT :limit;
