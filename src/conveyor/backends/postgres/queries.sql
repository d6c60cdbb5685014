-- Every statement the PostgreSQL backend runs, one named block each.
--
-- queries.py parses this file once; "__schema__" becomes the quoted schema
-- name and "__channel__" the notification channel (both validated, never user
-- values). Values are always bound parameters ($n); a variable-length list is
-- one array parameter. asyncpg prepares each statement once per connection
-- (its statement cache), so a hot statement is parsed and planned once.
-- Blocks returning jobs select j.* (the jobs table's columns are in JOB_COLUMNS order).


-- ------------------------------------------------------------- hot path --

-- name: enqueue
SELECT * FROM __schema__.enqueue($1::text[], $2::text[], $3::text[], $4::bytea[], $5::integer[],
    $6::integer[], $7::float8[], $8::float8[], $9::float8[], $10::float8[], $11::text[],
    $12::float8[], $13::text[], $14::bytea[], $15::text[], $16::text[], $17::text[],
    $18::integer[], $19::text[], $20::integer[], $21::text[], $22::float8[]);

-- name: enqueue_rate_keyed
-- enqueue's batch with a rate_limit_key per job ($23): the enqueue function's
-- rows, the keys stored in the same call (version 7).
SELECT * FROM __schema__.enqueue_rate_keyed($1::text[], $2::text[], $3::text[], $4::bytea[],
    $5::integer[], $6::integer[], $7::float8[], $8::float8[], $9::float8[], $10::float8[],
    $11::text[], $12::float8[], $13::text[], $14::bytea[], $15::text[], $16::text[],
    $17::text[], $18::integer[], $19::text[], $20::integer[], $21::text[], $22::float8[],
    $23::text[]);

-- name: enqueue_plain
SELECT * FROM __schema__.enqueue_plain($1::text[], $2::bytea[], $3::text, $4::text,
    $5::integer, $6::integer, $7::float8);

-- name: claim
-- The claim commits without waiting for its WAL flush (this transaction only).
-- A claim lost to a server crash puts its jobs back to waiting, as if the
-- worker had died: they run again, which at-least-once delivery allows, and
-- the worker's outcome for them is refused (its lease is gone). Enqueues and
-- outcomes still wait for the flush. Saves an fsync per pickup.
SELECT c.* FROM set_config('synchronous_commit', 'off', true) AS s,
    __schema__.claim($1::text[], $2::integer, $3::float8, $4::text, $5::text,
    $6::text[], $7::integer[], $8::text[], $9::integer[], $10::float8[], $11::boolean,
    $12::text[], $13::integer[], $14::text[], $15::integer[], $16::float8[]) AS c;

-- name: settle
SELECT * FROM __schema__.settle($1::text[], $2::text[], $3::text[], $4::bytea[], $5::text[],
    $6::jsonb[], $7::float8[], $8::bytea[], $9::text[], $10::integer[], $11::float8[]);

-- name: warm_claim
-- Run once per new connection (with warm_settle), in a transaction rolled
-- back: compiles the functions and plans their statements. Claims nothing.
SELECT count(*) FROM __schema__.claim('{" warm-up"}', 1, 0, '', '', NULL, NULL, NULL, NULL, NULL, true,
    NULL, NULL, NULL, NULL, NULL);

-- name: warm_settle
SELECT count(*) FROM __schema__.settle('{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', NULL, NULL, NULL);

-- name: complete
-- The common batch, one statement: every settlement a COMPLETE. $5 lists the
-- tasks whose runs count in their circuit: a success closes a circuit that is
-- not closed and forgets a closed one's failures (with successes only, batch
-- order does not matter). Returns the refused ids ('refused', id), the
-- circuits that closed ('closed', task) and, when a completed job had blocked
-- dependents (has_dependents), the queues of those it released ('wake', queue):
-- resolve_dependents runs after every completion of the statement (it reads
-- the aggregate of done) and sees them; with no flagged job it is not called.
WITH s AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bytea[])
        AS s(id, token, result, progress)
), done AS (
    UPDATE __schema__.jobs AS j
    SET state = 'completed',
        result = coalesce(s.result, j.result),
        failure_reason = NULL,
        finished_at = extract(epoch FROM clock_timestamp())::float8,
        progress = coalesce(s.progress, j.progress),
        lease_until = NULL,
        lease_token = NULL
    FROM s
    WHERE j.id = s.id AND j.lease_token = s.token AND j.state = 'active'
    RETURNING j.id, j.task, j.has_dependents
), finished AS (
    SELECT array_agg(done.id) AS ids FROM done WHERE done.has_dependents
), dirty AS (
    SELECT c.task, c.state FROM __schema__.circuits AS c
    WHERE c.task = ANY ($5::text[]) AND (c.state <> 'closed' OR c.failures > 0)
      AND c.task IN (SELECT done.task FROM done)
    ORDER BY c.task
    FOR UPDATE
), closed AS (
    UPDATE __schema__.circuits AS c
    SET state = 'closed', failures = 0, open_until = NULL
    FROM dirty WHERE c.task = dirty.task
    RETURNING c.task, dirty.state AS was
)
SELECT 'refused', s.id FROM s WHERE NOT EXISTS (SELECT 1 FROM done WHERE done.id = s.id)
UNION ALL
SELECT 'closed', closed.task FROM closed WHERE closed.was <> 'closed'
UNION ALL
SELECT 'wake', w.queue FROM finished, __schema__.resolve_dependents(finished.ids) AS w(queue);

-- name: complete_claim
-- complete, then a claim for the worker that sent it, in one round trip and one
-- transaction (settle_and_claim). The claim ($6..$21: claim's arguments) runs
-- once every completion, circuit change and release of the batch is done: its
-- first argument waits on the count of the settle rows (a function in FROM is
-- called after the items it refers to), and a volatile function's statements
-- see what earlier parts of the statement wrote. Completions and releases are
-- stamped with the statement's start, which is also the claim's now (and the
-- started_at of what it claims): a released dependent is due to the claim,
-- and never starts before its dependency finished. Commits synchronously (it
-- holds outcomes). Rows: ('refused', id), ('circuit', task, 'closed'),
-- ('wake', queue), then ('job' | 'expired', ..., the job row) for each job the
-- claim took or expired.
WITH s AS (
    SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bytea[])
        AS s(id, token, result, progress)
), done AS (
    UPDATE __schema__.jobs AS j
    SET state = 'completed',
        result = coalesce(s.result, j.result),
        failure_reason = NULL,
        finished_at = extract(epoch FROM statement_timestamp())::float8,
        progress = coalesce(s.progress, j.progress),
        lease_until = NULL,
        lease_token = NULL
    FROM s
    WHERE j.id = s.id AND j.lease_token = s.token AND j.state = 'active'
    RETURNING j.id, j.task, j.has_dependents
), finished AS (
    SELECT array_agg(done.id) AS ids FROM done WHERE done.has_dependents
), dirty AS (
    SELECT c.task, c.state FROM __schema__.circuits AS c
    WHERE c.task = ANY ($5::text[]) AND (c.state <> 'closed' OR c.failures > 0)
      AND c.task IN (SELECT done.task FROM done)
    ORDER BY c.task
    FOR UPDATE
), closed AS (
    UPDATE __schema__.circuits AS c
    SET state = 'closed', failures = 0, open_until = NULL
    FROM dirty WHERE c.task = dirty.task
    RETURNING c.task, dirty.state AS was
), settled AS MATERIALIZED (
    SELECT 'refused' AS kind, s.id AS name, NULL::text AS state
    FROM s WHERE NOT EXISTS (SELECT 1 FROM done WHERE done.id = s.id)
    UNION ALL
    SELECT 'circuit', closed.task, 'closed' FROM closed WHERE closed.was <> 'closed'
    UNION ALL
    SELECT 'wake', w.queue, NULL
    FROM finished, __schema__.resolve_dependents(
        finished.ids, extract(epoch FROM statement_timestamp())::float8) AS w(queue)
    WHERE finished.ids IS NOT NULL
), n AS (
    SELECT count(*) AS n FROM settled
)
SELECT settled.kind, settled.name, settled.state, 0, NULL::float8, NULL::__schema__.jobs
FROM settled
UNION ALL
SELECT CASE WHEN c.state = 'active' THEN 'job' ELSE 'expired' END, NULL, NULL, NULL, NULL, c
FROM n, __schema__.claim(CASE WHEN n.n >= 0 THEN $6::text[] END, $7::integer, $8::float8,
    $9::text, $10::text, $11::text[], $12::integer[], $13::text[], $14::integer[],
    $15::float8[], $16::boolean, $17::text[], $18::integer[], $19::text[], $20::integer[],
    $21::float8[]) AS c;

-- name: settle_claim
-- settle (any outcomes), then a claim for the worker that sent it, in one round
-- trip and one transaction (settle_and_claim; the order as in complete_claim).
-- settle() releases dependents at the clock's time, after the claim's now: a
-- dependent it released is claimed by the worker's next claim, not this one.
-- Rows: settle's, then ('job' | 'expired', ..., the job row) per claimed or
-- expired job.
WITH settled AS MATERIALIZED (
    SELECT * FROM __schema__.settle($1::text[], $2::text[], $3::text[], $4::bytea[],
        $5::text[], $6::jsonb[], $7::float8[], $8::bytea[], $9::text[], $10::integer[],
        $11::float8[])
), n AS (
    SELECT count(*) AS n FROM settled
)
SELECT settled.out_kind, settled.out_name, settled.out_state, settled.out_failures,
    settled.out_until, NULL::__schema__.jobs
FROM settled
UNION ALL
SELECT CASE WHEN c.state = 'active' THEN 'job' ELSE 'expired' END, NULL, NULL, NULL, NULL, c
FROM n, __schema__.claim(CASE WHEN n.n >= 0 THEN $12::text[] END, $13::integer, $14::float8,
    $15::text, $16::text, $17::text[], $18::integer[], $19::text[], $20::integer[],
    $21::float8[], $22::boolean, $23::text[], $24::integer[], $25::text[], $26::integer[],
    $27::float8[]) AS c;

-- name: renew
-- Extend the leases held under their tokens; returns the renewed ids and
-- their cancel flags.
UPDATE __schema__.jobs AS j
SET lease_until = extract(epoch FROM clock_timestamp())::float8 + $3::float8
FROM unnest($1::text[], $2::text[]) AS s(id, token)
WHERE j.id = s.id AND j.lease_token = s.token AND j.state = 'active'
RETURNING j.id, j.cancel_requested;

-- name: save_progress
-- Store progress of the jobs held under their tokens; returns the stored ids.
UPDATE __schema__.jobs AS j
SET progress = s.progress
FROM unnest($1::text[], $2::text[], $3::bytea[]) AS s(id, token, progress)
WHERE j.id = s.id AND j.lease_token = s.token AND j.state = 'active'
RETURNING j.id;

-- name: next_due
-- When the next delayed job of $1 (queues) becomes due.
SELECT min(j.run_at)
FROM __schema__.jobs AS j
WHERE j.state = 'delayed' AND j.queue = ANY ($1::text[]);


-- name: has_waiting
-- Whether any of $1 (queues) has waiting jobs (a wait that began before LISTEN).
SELECT EXISTS (
    SELECT 1 FROM __schema__.jobs AS j
    WHERE j.state = 'waiting' AND j.queue = ANY ($1::text[])
);


-- ---------------------------------------------------------------- reads --

-- name: now
SELECT extract(epoch FROM clock_timestamp())::float8;

-- name: jobs_by_ids
SELECT j.* FROM __schema__.jobs AS j WHERE j.id = ANY ($1::text[]);

-- name: list_jobs
-- Jobs matching a JobFilter (a NULL parameter matches everything), newest first.
SELECT j.*
FROM __schema__.jobs AS j
WHERE ($1::text[] IS NULL OR j.state = ANY ($1::text[]))
  AND ($2::text IS NULL OR j.queue = $2::text)
  AND ($3::text IS NULL OR j.task = $3::text)
  AND ($4::text IS NULL OR j.tenant = $4::text)
  AND ($5::text IS NULL OR j.failure_reason = $5::text)
  AND ($6::text IS NULL OR j.idempotency_key = $6::text)
  AND ($7::float8 IS NULL OR j.finished_at < $7::float8)
  AND ($8::text IS NULL OR j.workflow_id = $8::text)
ORDER BY j.id DESC
LIMIT $9::integer OFFSET $10::integer;

-- name: list_workflow_jobs
-- Like list_jobs, for a JobFilter with a workflow_id ($8): that workflow's
-- rows only, newest first, through jobs_workflow (a generic plan of
-- list_jobs, whose "$8 IS NULL OR" cannot use an index, walks every job).
SELECT j.*
FROM __schema__.jobs AS j
WHERE j.workflow_id = $8::text
  AND ($1::text[] IS NULL OR j.state = ANY ($1::text[]))
  AND ($2::text IS NULL OR j.queue = $2::text)
  AND ($3::text IS NULL OR j.task = $3::text)
  AND ($4::text IS NULL OR j.tenant = $4::text)
  AND ($5::text IS NULL OR j.failure_reason = $5::text)
  AND ($6::text IS NULL OR j.idempotency_key = $6::text)
  AND ($7::float8 IS NULL OR j.finished_at < $7::float8)
ORDER BY j.id DESC
LIMIT $9::integer OFFSET $10::integer;

-- name: count_jobs
SELECT count(*)
FROM __schema__.jobs AS j
WHERE ($1::text[] IS NULL OR j.state = ANY ($1::text[]))
  AND ($2::text IS NULL OR j.queue = $2::text)
  AND ($3::text IS NULL OR j.task = $3::text)
  AND ($4::text IS NULL OR j.tenant = $4::text)
  AND ($5::text IS NULL OR j.failure_reason = $5::text)
  AND ($6::text IS NULL OR j.idempotency_key = $6::text)
  AND ($7::float8 IS NULL OR j.finished_at < $7::float8)
  AND ($8::text IS NULL OR j.workflow_id = $8::text);

-- name: count_workflow_jobs
-- Like count_jobs, for a JobFilter with a workflow_id ($8), through jobs_workflow.
SELECT count(*)
FROM __schema__.jobs AS j
WHERE j.workflow_id = $8::text
  AND ($1::text[] IS NULL OR j.state = ANY ($1::text[]))
  AND ($2::text IS NULL OR j.queue = $2::text)
  AND ($3::text IS NULL OR j.task = $3::text)
  AND ($4::text IS NULL OR j.tenant = $4::text)
  AND ($5::text IS NULL OR j.failure_reason = $5::text)
  AND ($6::text IS NULL OR j.idempotency_key = $6::text)
  AND ($7::float8 IS NULL OR j.finished_at < $7::float8);

-- name: count_state
-- Jobs in one state, through that state's partial index.
SELECT CASE $1::text
    WHEN 'blocked' THEN (SELECT count(*) FROM __schema__.jobs WHERE state = 'blocked')
    WHEN 'waiting' THEN (SELECT count(*) FROM __schema__.jobs WHERE state = 'waiting')
    WHEN 'delayed' THEN (SELECT count(*) FROM __schema__.jobs WHERE state = 'delayed')
    WHEN 'active' THEN (SELECT count(*) FROM __schema__.jobs WHERE state = 'active')
    ELSE (SELECT count(*) FROM __schema__.jobs
          WHERE state = $1::text AND finished_at IS NOT NULL) END;

-- name: counts_by_queue
-- Jobs per queue and state, each state from its own partial index.
SELECT queue, 'blocked', count(*) FROM __schema__.jobs WHERE state = 'blocked' GROUP BY queue
UNION ALL
SELECT queue, 'waiting', count(*) FROM __schema__.jobs WHERE state = 'waiting' GROUP BY queue
UNION ALL
SELECT queue, 'delayed', count(*) FROM __schema__.jobs WHERE state = 'delayed' GROUP BY queue
UNION ALL
SELECT queue, 'active', count(*) FROM __schema__.jobs WHERE state = 'active' GROUP BY queue
UNION ALL
SELECT queue, state, count(*) FROM __schema__.jobs
WHERE finished_at IS NOT NULL AND state IN ('completed', 'failed', 'cancelled')
GROUP BY state, queue;

-- name: queue_rows
-- weights as JSON text (tenant -> weight).
SELECT name, paused, max_size, ttl, fairness, weights::text FROM __schema__.queues ORDER BY name;

-- name: oldest_waiting
SELECT queue, min(run_at)
FROM __schema__.jobs
WHERE state = 'waiting' AND run_at <= extract(epoch FROM clock_timestamp())::float8
GROUP BY queue;

-- name: cancel_requested_of
SELECT id FROM __schema__.jobs
WHERE id = ANY ($1::text[]) AND state = 'active' AND cancel_requested;


-- ------------------------------------------------------- acting on jobs --

-- name: cancel_job
-- Blocked/waiting/delayed: cancelled now (and its blocked dependents resolved,
-- when it has any); active: flag cancel_requested. Returns the job when it changed.
WITH c AS (
    UPDATE __schema__.jobs AS j
    SET state = CASE WHEN j.state = 'active' THEN j.state ELSE 'cancelled' END,
        finished_at = CASE WHEN j.state = 'active' THEN j.finished_at
                           ELSE extract(epoch FROM clock_timestamp())::float8 END,
        cancel_requested = j.cancel_requested OR j.state = 'active'
    WHERE j.id = $1::text AND j.state IN ('blocked', 'waiting', 'delayed', 'active')
    RETURNING j.*
), resolved AS (
    SELECT count(*) FROM c, __schema__.resolve_dependents(
        CASE WHEN c.has_dependents AND c.state = 'cancelled' THEN ARRAY[c.id] END)
)
SELECT c.* FROM c, resolved;

-- name: retry_target_for_update
-- A job's state and the job it was already retried as, locked so that two
-- retries of one dead letter serialize.
SELECT state, retried_as FROM __schema__.jobs WHERE id = $1::text FOR UPDATE;

-- name: insert_retry_copy
-- Copy failed job $1 into a new waiting job $2, fresh attempts, same TTL from
-- now, same place in a workflow (depends_on, its policy, workflow_id), same
-- concurrency_key and rate_limit_key; fair, which every job of a queue has
-- as the queue is.
INSERT INTO __schema__.jobs (id, task, queue, state, priority, max_attempts, timeout, ttl,
                             run_at, created_at, expires_at, tenant, retry_of, payload, metadata,
                             depends_on, on_dependency_failure, workflow_id, concurrency_key,
                             rate_limit_key, fair)
SELECT $2::text, o.task, o.queue, 'waiting', o.priority, o.max_attempts, o.timeout, o.ttl,
       t.now, t.now, t.now + o.ttl, o.tenant, o.id, o.payload, o.metadata,
       o.depends_on, o.on_dependency_failure, o.workflow_id, o.concurrency_key,
       o.rate_limit_key, o.fair
FROM __schema__.jobs AS o,
     (SELECT extract(epoch FROM clock_timestamp())::float8 AS now) AS t
WHERE o.id = $1::text
RETURNING queue;

-- name: mark_retried
UPDATE __schema__.jobs SET retried_as = $2::text WHERE id = $1::text;

-- name: cancelled_dependents
-- The jobs cancelled dependency_failed that depend on one of $1, with their
-- depends_on, locked: what a dead-letter retry may resume. Through
-- jobs_finished (cancelled jobs only); a dead-letter retry is rare.
SELECT j.id, j.depends_on FROM __schema__.jobs AS j
WHERE j.state = 'cancelled' AND j.finished_at IS NOT NULL
  AND j.failure_reason = 'dependency_failed' AND j.depends_on && $1::text[]
ORDER BY j.id
FOR NO KEY UPDATE;

-- name: dependency_states_for_update
-- The states of jobs $1, locked in id order: one that finishes meanwhile waits
-- for this transaction, then finds the dependency rows it wrote.
SELECT j.id, j.state FROM __schema__.jobs AS j
WHERE j.id = ANY ($1::text[])
ORDER BY j.id
FOR NO KEY UPDATE;

-- name: resume_dependents
-- The cancelled dependents $1 of retried job $2 wait again, on its copy $3.
UPDATE __schema__.jobs AS j
SET state = 'blocked', failure_reason = NULL, finished_at = NULL,
    depends_on = array_replace(j.depends_on, $2::text, $3::text)
WHERE j.id = ANY ($1::text[]) AND j.state = 'cancelled';

-- name: add_dependency_edges
-- Blocked jobs $2 wait on unfinished jobs $1 (pairwise); those are flagged so
-- that finishing them resolves their dependents.
WITH edges AS (
    INSERT INTO __schema__.job_dependencies (depends_on, job_id)
    SELECT e.dep, e.job FROM unnest($1::text[], $2::text[]) AS e(dep, job)
    ON CONFLICT DO NOTHING
)
UPDATE __schema__.jobs AS j SET has_dependents = true
WHERE j.id = ANY ($1::text[]) AND NOT j.has_dependents;

-- name: notify
SELECT pg_notify('__channel__', q) FROM unnest($1::text[]) AS q;

-- name: delete_jobs
-- Delete the non-active jobs among $1; keyed ones leave their final state on the key.
WITH d AS (
    DELETE FROM __schema__.jobs
    WHERE id = ANY ($1::text[]) AND state <> 'active'
    RETURNING idempotency_key, id, state
), k AS (
    UPDATE __schema__.idempotency_keys AS ik SET final_state = d.state
    FROM d WHERE ik.key = d.idempotency_key AND ik.job_id = d.id
)
SELECT count(*) FROM d;

-- name: purge_chunk
-- Delete up to $9 non-active jobs matching a JobFilter (NULL matches everything).
WITH d AS (
    DELETE FROM __schema__.jobs
    WHERE id IN (
        SELECT j.id FROM __schema__.jobs AS j
        WHERE j.state <> 'active'
          AND ($1::text[] IS NULL OR j.state = ANY ($1::text[]))
          AND ($2::text IS NULL OR j.queue = $2::text)
          AND ($3::text IS NULL OR j.task = $3::text)
          AND ($4::text IS NULL OR j.tenant = $4::text)
          AND ($5::text IS NULL OR j.failure_reason = $5::text)
          AND ($6::text IS NULL OR j.idempotency_key = $6::text)
          AND ($7::float8 IS NULL OR j.finished_at < $7::float8)
          AND ($8::text IS NULL OR j.workflow_id = $8::text)
        LIMIT $9::integer
        FOR UPDATE SKIP LOCKED)
    RETURNING idempotency_key, id, state
), k AS (
    UPDATE __schema__.idempotency_keys AS ik SET final_state = d.state
    FROM d WHERE ik.key = d.idempotency_key AND ik.job_id = d.id
)
SELECT count(*) FROM d;


-- ------------------------------------------------------------ maintenance --

-- name: recover_stalled
-- Active jobs whose lease ended: back to waiting with stalls + 1 and a fresh
-- TTL, or failed/stalled when no attempt or stall is left, or cancelled when a
-- cancel was requested (it wins). Rows another process is settling or
-- recovering right now are skipped (SKIP LOCKED): safe on many machines. A
-- failed or cancelled job with blocked dependents resolves them (after every
-- update of the statement: resolved reads the aggregate of r).
WITH t AS (SELECT extract(epoch FROM clock_timestamp())::float8 AS now), r AS (
    UPDATE __schema__.jobs AS j
    SET state = CASE WHEN j.cancel_requested THEN 'cancelled'
                     WHEN j.attempts >= j.max_attempts OR j.stalls + 1 > $1::integer THEN 'failed'
                     ELSE 'waiting' END,
        failure_reason = CASE WHEN j.cancel_requested THEN j.failure_reason
                              WHEN j.attempts >= j.max_attempts OR j.stalls + 1 > $1::integer
                              THEN 'stalled' ELSE j.failure_reason END,
        finished_at = CASE WHEN j.cancel_requested OR j.attempts >= j.max_attempts
                                OR j.stalls + 1 > $1::integer
                           THEN t.now ELSE j.finished_at END,
        worker_id = CASE WHEN j.cancel_requested OR j.attempts >= j.max_attempts
                              OR j.stalls + 1 > $1::integer
                         THEN j.worker_id ELSE NULL END,
        expires_at = CASE WHEN j.cancel_requested OR j.attempts >= j.max_attempts
                               OR j.stalls + 1 > $1::integer
                          THEN j.expires_at ELSE t.now + j.ttl END,
        stalls = j.stalls + 1,
        lease_until = NULL,
        lease_token = NULL,
        errors = (CASE WHEN jsonb_typeof(j.errors) = 'array' THEN j.errors ELSE '[]'::jsonb END)
            || jsonb_build_array(jsonb_build_object(
                'type', 'Stalled', 'message', 'lease expired: the worker stopped renewing it',
                'traceback', '', 'attempt', j.attempts, 'reason', 'stalled', 'at', t.now))
    FROM t
    WHERE j.id IN (SELECT x.id FROM __schema__.jobs AS x, t
                   WHERE x.state = 'active' AND x.lease_until < t.now
                   FOR UPDATE OF x SKIP LOCKED)
    RETURNING j.*
), finished AS (
    SELECT array_agg(r.id) AS ids FROM r
    WHERE r.has_dependents AND r.state IN ('failed', 'cancelled')
), resolved AS (
    SELECT count(*) FROM finished, __schema__.resolve_dependents(finished.ids)
)
SELECT r.* FROM r, resolved;

-- name: prune_by_age
-- Delete up to $5 plain jobs (no workflow: prune_workflows) in state $1
-- finished before now - $2, of task $3 (NULL = any) and not of the tasks in $4.
WITH d AS (
    DELETE FROM __schema__.jobs
    WHERE id IN (
        SELECT j.id FROM __schema__.jobs AS j
        WHERE j.state = $1::text AND j.finished_at IS NOT NULL
          AND j.finished_at < extract(epoch FROM clock_timestamp())::float8 - $2::float8
          AND ($3::text IS NULL OR j.task = $3::text)
          AND j.task <> ALL ($4::text[])
          AND j.workflow_id IS NULL
        LIMIT $5::integer
        FOR UPDATE SKIP LOCKED)
    RETURNING idempotency_key, id, state
), k AS (
    UPDATE __schema__.idempotency_keys AS ik SET final_state = d.state
    FROM d WHERE ik.key = d.idempotency_key AND ik.job_id = d.id
)
SELECT count(*) FROM d;

-- name: prune_by_count
-- Delete up to $5 plain jobs in state $1 beyond the $2 newest by finished_at
-- (workflow jobs count among the newest, but are left to prune_workflows).
WITH d AS (
    DELETE FROM __schema__.jobs
    WHERE id IN (
        SELECT l.id FROM __schema__.jobs AS l
        WHERE l.id IN (
            SELECT s.id FROM (
                SELECT j.id, j.workflow_id FROM __schema__.jobs AS j
                WHERE j.state = $1::text AND j.finished_at IS NOT NULL
                  AND ($3::text IS NULL OR j.task = $3::text)
                  AND j.task <> ALL ($4::text[])
                ORDER BY j.finished_at DESC, j.id DESC
                OFFSET $2::integer) AS s
            WHERE s.workflow_id IS NULL
            LIMIT $5::integer)
        FOR UPDATE SKIP LOCKED)
    RETURNING idempotency_key, id, state
), k AS (
    UPDATE __schema__.idempotency_keys AS ik SET final_state = d.state
    FROM d WHERE ik.key = d.idempotency_key AND ik.job_id = d.id
)
SELECT count(*) FROM d;

-- name: count_threshold
-- The $2-th newest job (finished_at, id) in state $1 of task $3 (NULL = any)
-- and not of the tasks in $4; no row when there are fewer.
SELECT j.finished_at, j.id FROM __schema__.jobs AS j
WHERE j.state = $1::text AND j.finished_at IS NOT NULL
  AND ($3::text IS NULL OR j.task = $3::text)
  AND j.task <> ALL ($4::text[])
ORDER BY j.finished_at DESC, j.id DESC
OFFSET $2::integer - 1
LIMIT 1;

-- name: finished_workflows
-- The workflows none of whose jobs is live (index jobs_workflow).
SELECT workflow_id FROM __schema__.jobs
WHERE workflow_id IS NOT NULL
GROUP BY workflow_id
HAVING bool_and(state IN ('completed', 'failed', 'cancelled'));

-- name: workflow_rows
-- Every job of the workflows in $1, locked (a dead-letter retry of one waits).
SELECT workflow_id, id, state, task, finished_at FROM __schema__.jobs
WHERE workflow_id = ANY ($1::text[])
ORDER BY id
FOR UPDATE;

-- name: delete_workflows
-- Delete every job of the workflows in $1 that still have no live job (a copy
-- a retry committed meanwhile keeps its workflow).
WITH d AS (
    DELETE FROM __schema__.jobs AS j
    WHERE j.workflow_id = ANY ($1::text[])
      AND NOT EXISTS (
          SELECT 1 FROM __schema__.jobs AS l
          WHERE l.workflow_id = j.workflow_id
            AND l.state NOT IN ('completed', 'failed', 'cancelled'))
    RETURNING idempotency_key, id, state
), k AS (
    UPDATE __schema__.idempotency_keys AS ik SET final_state = d.state
    FROM d WHERE ik.key = d.idempotency_key AND ik.job_id = d.id
)
SELECT count(*) FROM d;

-- name: prune_keys
DELETE FROM __schema__.idempotency_keys
WHERE expires_at <= extract(epoch FROM clock_timestamp())::float8;

-- name: prune_rate_starts
DELETE FROM __schema__.rate_starts
WHERE at <= extract(epoch FROM clock_timestamp())::float8 - period;

-- name: prune_fair_passes
-- Passes at or below their queue's vtime: a claim clamps them to vtime anyway.
DELETE FROM __schema__.fair_tenants AS p
USING __schema__.queues AS q
WHERE q.name = p.queue AND p.pass <= q.vtime;

-- name: prune_rate_key_starts
-- Per-key rate-limit starts older than their window.
DELETE FROM __schema__.rate_key_starts
WHERE at <= extract(epoch FROM clock_timestamp())::float8 - period;


-- ---------------------------------------------------------------- queues --

-- name: configure_queue
-- Limits and fairness ($5: weights as JSON text); paused and vtime are kept.
INSERT INTO __schema__.queues (name, max_size, ttl, fairness, weights)
VALUES ($1::text, $2::integer, $3::float8, $4::text, $5::text::jsonb)
ON CONFLICT (name) DO UPDATE SET
    max_size = excluded.max_size, ttl = excluded.ttl,
    fairness = excluded.fairness, weights = excluded.weights;

-- name: configure_queue_plain
-- configure_queue for a queue that is and stays plain (no row: plain): a row
-- only when it was plain when locked, so a concurrent switch to fair is seen.
INSERT INTO __schema__.queues (name, max_size, ttl, fairness, weights)
VALUES ($1::text, $2::integer, $3::float8, NULL, $4::text::jsonb)
ON CONFLICT (name) DO UPDATE SET
    max_size = excluded.max_size, ttl = excluded.ttl, weights = excluded.weights
    WHERE queues.fairness IS NULL
RETURNING 1;

-- name: configure_queue_fair
-- configure_queue for a queue that is and stays fair: a row only when it was
-- fair when locked.
UPDATE __schema__.queues SET max_size = $2::integer, ttl = $3::float8, fairness = $4::text,
    weights = $5::text::jsonb
WHERE name = $1::text AND fairness IS NOT NULL
RETURNING 1;

-- name: lock_jobs_for_fairness
-- A queue's fairness changes: no job is written until its jobs are flagged
-- (enqueues read the fairness in their INSERT, after this lock is released).
LOCK TABLE __schema__.jobs IN SHARE ROW EXCLUSIVE MODE;

-- name: mark_queue_fair
-- Every job of queue $1, in any state, flagged fair ($2) as the queue now is
-- (a finished one may wait again: a retry copies the flag, a resumed
-- dependent keeps it). A pass over the jobs, only when the fairness changes.
UPDATE __schema__.jobs SET fair = $2::boolean WHERE queue = $1::text AND fair <> $2::boolean;

-- name: tenant_counts
-- Waiting (+ delayed) and active jobs per tenant of one queue: most waiting
-- first, then most active, then by name (bytewise, NULL first). Each state
-- from its own partial index (the waiting jobs of a fair queue, all flagged
-- fair, from jobs_fair; of a plain one from jobs_claim).
SELECT c.tenant, sum(c.waiting)::integer AS waiting, sum(c.active)::integer AS active
FROM (
    SELECT j.tenant, count(*) AS waiting, 0 AS active FROM __schema__.jobs AS j
    WHERE j.state = 'waiting' AND j.fair AND j.queue = $1::text
      AND EXISTS (SELECT 1 FROM __schema__.queues AS q
                  WHERE q.name = $1::text AND q.fairness IS NOT NULL)
    GROUP BY j.tenant
    UNION ALL
    SELECT j.tenant, count(*), 0 FROM __schema__.jobs AS j
    WHERE j.state = 'waiting' AND j.queue = $1::text
      AND NOT EXISTS (SELECT 1 FROM __schema__.queues AS q
                      WHERE q.name = $1::text AND q.fairness IS NOT NULL)
    GROUP BY j.tenant
    UNION ALL
    SELECT j.tenant, count(*), 0 FROM __schema__.jobs AS j
    WHERE j.state = 'delayed' AND j.queue = $1::text GROUP BY j.tenant
    UNION ALL
    SELECT j.tenant, 0, count(*) FROM __schema__.jobs AS j
    WHERE j.state = 'active' AND j.queue = $1::text GROUP BY j.tenant
) AS c
GROUP BY c.tenant
ORDER BY waiting DESC, active DESC, c.tenant COLLATE "C" NULLS FIRST
LIMIT $2::integer;

-- name: set_queue_paused
INSERT INTO __schema__.queues (name, paused)
VALUES ($1::text, $2::boolean)
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused;

-- name: undispatch_queue
-- A resumed queue's waiting jobs lose their dispatch record, so a RabbitMQ
-- relay publishes them again: a message delivered while the queue was paused
-- claimed nothing and was acknowledged. Changes no row where nothing was
-- dispatched (a store without dispatch).
UPDATE __schema__.jobs SET dispatched_at = NULL
WHERE queue = $1::text AND state = 'waiting' AND dispatched_at IS NOT NULL;

-- name: queue_names_with_jobs
SELECT queue FROM __schema__.jobs WHERE state = 'blocked'
UNION SELECT queue FROM __schema__.jobs WHERE state = 'waiting'
UNION SELECT queue FROM __schema__.jobs WHERE state = 'delayed'
UNION SELECT queue FROM __schema__.jobs WHERE state = 'active'
UNION SELECT queue FROM __schema__.jobs WHERE finished_at IS NOT NULL
    AND state IN ('completed', 'failed', 'cancelled');


-- -------------------------------------------------------------- circuits --

-- name: list_circuits
SELECT task, state, failures, open_until FROM __schema__.circuits ORDER BY task;

-- name: reset_circuit
UPDATE __schema__.circuits SET state = 'closed', failures = 0, open_until = NULL
WHERE task = $1::text;

-- name: clear_circuit_failures
-- Forget the failures of closed circuits: of $1, or of every task when NULL.
UPDATE __schema__.circuits SET failures = 0
WHERE state = 'closed' AND failures > 0 AND ($1::text IS NULL OR task = $1::text);


-- ------------------------------------------------------------ heartbeats --

-- name: record_heartbeat
INSERT INTO __schema__.workers (id, info, last_seen, heartbeat_interval)
VALUES ($1::text, $2::bytea, extract(epoch FROM clock_timestamp())::float8, $3::float8)
ON CONFLICT (id) DO UPDATE SET
    info = excluded.info,
    last_seen = excluded.last_seen,
    heartbeat_interval = excluded.heartbeat_interval;

-- name: list_workers
SELECT id, info, last_seen, heartbeat_interval FROM __schema__.workers ORDER BY id;

-- name: remove_worker
DELETE FROM __schema__.workers WHERE id = $1::text;

-- name: prune_workers
WITH d AS (
    DELETE FROM __schema__.workers
    WHERE last_seen < extract(epoch FROM clock_timestamp())::float8 - $1::float8
    RETURNING 1
)
SELECT count(*) FROM d;


-- ------------------------------------------------------------- schedules --

-- name: schedules_for_update
SELECT name, fingerprint FROM __schema__.schedules
WHERE name = ANY ($1::text[]) ORDER BY name FOR UPDATE;

-- name: insert_schedule
-- A new schedule ($1..$12 its spec, $13 first fire); a name another scheduler
-- inserted meanwhile is left alone.
INSERT INTO __schema__.schedules (name, task, payload, spec_cron, spec_every, timezone, start_at,
                                  end_at, fire_limit, misfire, options, fingerprint, cron, every,
                                  next_fire_at, updated_at)
VALUES ($1::text, $2::text, $3::bytea, $4::text, $5::float8, $6::text, $7::float8, $8::float8,
        $9::integer, $10::text, $11::bytea, $12::text, $4::text, $5::float8, $13::float8,
        extract(epoch FROM clock_timestamp())::float8)
ON CONFLICT (name) DO NOTHING;

-- name: replace_schedule
-- A changed definition: new spec, override dropped, next fire reset; paused
-- and fires kept.
UPDATE __schema__.schedules
SET task = $2::text, payload = $3::bytea, spec_cron = $4::text, spec_every = $5::float8,
    timezone = $6::text, start_at = $7::float8, end_at = $8::float8, fire_limit = $9::integer,
    misfire = $10::text, options = $11::bytea, fingerprint = $12::text, cron = $4::text,
    every = $5::float8, next_fire_at = $13::float8,
    updated_at = extract(epoch FROM clock_timestamp())::float8
WHERE name = $1::text;

-- name: schedules_by_name
SELECT name, task, payload, spec_cron, spec_every, timezone, start_at, end_at, fire_limit,
       misfire, options, fingerprint, cron, every, paused, next_fire_at, fires, last_fire_at,
       updated_at
FROM __schema__.schedules
WHERE $1::text[] IS NULL OR name = ANY ($1::text[])
ORDER BY name;

-- name: update_schedule
-- Operator changes: $2 paused (NULL keeps it); $3 set the interval fields when
-- true, to cron $4 / every $5; $6 replace next_fire_at with $7 when true.
UPDATE __schema__.schedules
SET paused = coalesce($2::boolean, paused),
    cron = CASE WHEN $3::boolean THEN $4::text ELSE cron END,
    every = CASE WHEN $3::boolean THEN $5::float8 ELSE every END,
    next_fire_at = CASE WHEN $6::boolean THEN $7::float8 ELSE next_fire_at END,
    updated_at = extract(epoch FROM clock_timestamp())::float8
WHERE name = $1::text
RETURNING name;

-- name: advance_schedule
-- Compare-and-set: only when the stored next fire is still $2. $4: a fire
-- happened (count it); false: missed slots skipped, only the next fire moves.
UPDATE __schema__.schedules
SET next_fire_at = $3::float8,
    fires = fires + CASE WHEN $4::boolean THEN 1 ELSE 0 END,
    last_fire_at = CASE WHEN $4::boolean THEN $2::float8 ELSE last_fire_at END,
    updated_at = extract(epoch FROM clock_timestamp())::float8
WHERE name = $1::text AND next_fire_at = $2::float8
RETURNING name;

-- name: delete_schedules
WITH d AS (DELETE FROM __schema__.schedules WHERE name = ANY ($1::text[]) RETURNING 1)
SELECT count(*) FROM d;


-- ------------------------------------------------------------- job stats --

-- name: add_stat_totals
-- Add increments (one array element per (task, queue, status); $6 every row's
-- buckets one after another, $7 buckets per row) into the cumulative totals.
INSERT INTO __schema__.job_stat_totals AS t (task, queue, status, count, duration_sum, buckets)
SELECT s.task, s.queue, s.status, s.count, s.duration_sum, ($6::bigint[])[(s.ord - 1) * $7::integer + 1 : s.ord * $7::integer]
FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::float8[])
     WITH ORDINALITY AS s(task, queue, status, count, duration_sum, ord)
ORDER BY s.task, s.queue, s.status
ON CONFLICT (task, queue, status) DO UPDATE SET
    count = t.count + excluded.count,
    duration_sum = t.duration_sum + excluded.duration_sum,
    buckets = (SELECT array_agg(coalesce(a, 0) + coalesce(b, 0) ORDER BY i)
               FROM unnest(t.buckets, excluded.buckets) WITH ORDINALITY AS x(a, b, i));

-- name: add_stat_series
-- The same increments into the current minute's series rows.
INSERT INTO __schema__.job_stat_series AS t (minute, task, queue, status, count, duration_sum,
                                             buckets)
SELECT floor(extract(epoch FROM clock_timestamp())::float8 / 60) * 60,
       s.task, s.queue, s.status, s.count, s.duration_sum, ($6::bigint[])[(s.ord - 1) * $7::integer + 1 : s.ord * $7::integer]
FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::float8[])
     WITH ORDINALITY AS s(task, queue, status, count, duration_sum, ord)
ORDER BY s.task, s.queue, s.status
ON CONFLICT (minute, task, queue, status) DO UPDATE SET
    count = t.count + excluded.count,
    duration_sum = t.duration_sum + excluded.duration_sum,
    buckets = (SELECT array_agg(coalesce(a, 0) + coalesce(b, 0) ORDER BY i)
               FROM unnest(t.buckets, excluded.buckets) WITH ORDINALITY AS x(a, b, i));

-- name: stat_totals
SELECT task, queue, status, count, duration_sum, buckets, 0::float8
FROM __schema__.job_stat_totals ORDER BY task, queue, status;

-- name: stat_series
SELECT task, queue, status, count, duration_sum, buckets, minute
FROM __schema__.job_stat_series WHERE minute >= $1::float8
ORDER BY minute, task, queue, status;

-- name: prune_stat_series
WITH d AS (
    DELETE FROM __schema__.job_stat_series
    WHERE minute < extract(epoch FROM clock_timestamp())::float8 - $1::float8
    RETURNING 1
)
SELECT count(*) FROM d;


-- ------------------------------------------------------------------ misc --

-- name: ping
SELECT 1;

-- name: key_counts
-- Active and waiting jobs per (task, concurrency_key): most active first
-- (ties: most waiting, task, key bytewise with NULL first), $2 groups. Keyed
-- active jobs from jobs_key_active, the keyless active jobs of the tasks $1
-- from jobs_lease, the waiting jobs of $1 from one pass over jobs_claim's rows
-- (no index keys waiting jobs by concurrency key).
SELECT c.task, c.concurrency_key, sum(c.active)::integer AS active,
       sum(c.waiting)::integer AS waiting
FROM (
    SELECT j.task, j.concurrency_key, count(*) AS active, 0 AS waiting
    FROM __schema__.jobs AS j
    WHERE j.state = 'active' AND j.concurrency_key IS NOT NULL
    GROUP BY j.task, j.concurrency_key
    UNION ALL
    SELECT j.task, NULL, count(*), 0 FROM __schema__.jobs AS j
    WHERE j.state = 'active' AND j.concurrency_key IS NULL AND j.task = ANY($1::text[])
    GROUP BY j.task
    UNION ALL
    SELECT j.task, j.concurrency_key, 0, count(*) FROM __schema__.jobs AS j
    WHERE j.state = 'waiting' AND j.task = ANY($1::text[])
    GROUP BY j.task, j.concurrency_key
) AS c
GROUP BY c.task, c.concurrency_key
ORDER BY active DESC, waiting DESC, c.task COLLATE "C", c.concurrency_key COLLATE "C" NULLS FIRST
LIMIT $2::integer;

-- name: rate_key_usage
-- Starts per (task, rate_key) window in (now - period, now] on the server's
-- clock (the claim's), for the tasks $1 with periods $2: most starts first
-- (ties: task, key bytewise with NULL first), $3 windows. Each task's log read
-- through rate_key_starts_window, never trimmed here.
SELECT s.task, s.rate_key, sum(s.n)::integer AS used
FROM __schema__.rate_key_starts AS s
JOIN unnest($1::text[], $2::float8[]) AS r(task, period) ON s.task = r.task
WHERE s.at > extract(epoch FROM clock_timestamp())::float8 - r.period
GROUP BY s.task, s.rate_key
ORDER BY used DESC, s.task COLLATE "C", s.rate_key COLLATE "C" NULLS FIRST
LIMIT $3::integer;
