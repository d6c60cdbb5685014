-- The relay, reconciler and dead-letter handler of RabbitMQ dispatch on SQLite
-- (conveyor.dispatch, docs/explanation/rabbitmq.md): the statements of
-- backends/postgres/dispatch.sql for one file. No SKIP LOCKED here: every
-- write holds the database's one write lock, so a take and a claim follow one
-- another and never skip each other's rows.
--
-- "Undispatched" = due (waiting, or delayed with run_at passed: only a claim
-- promotes) and never published since it became due: dispatched_at is NULL or
-- older than run_at (a retry moves run_at past it).

-- name: ensure_index
CREATE INDEX IF NOT EXISTS jobs_dispatch ON jobs (run_at)
WHERE state IN ('waiting', 'delayed') AND (dispatched_at IS NULL OR dispatched_at < run_at);

-- name: take
-- Mark up to :limit undispatched jobs due for at least :age seconds dispatched
-- at :now and return them, oldest first (a worker woken by the commit watch
-- claims a fresh job first). Marked before the publish, so a relay that dies in between
-- leaves a job the reconciler republishes.
UPDATE jobs SET dispatched_at = :now
WHERE id IN (SELECT x.id FROM jobs AS x INDEXED BY jobs_dispatch
             WHERE x.state IN ('waiting', 'delayed')
               AND (x.dispatched_at IS NULL OR x.dispatched_at < x.run_at)
               AND x.run_at <= :now - :age
             ORDER BY x.run_at
             LIMIT :limit)
RETURNING id, queue, expires_at, dispatched_at, run_at;

-- name: untake
-- Publishing failed: undispatched again, unless dispatched since (:items is a
-- JSON array of [id, stamp] pairs, the stamps they were taken with).
UPDATE jobs SET dispatched_at = NULL
WHERE id IN (SELECT json_extract(u.value, '$[0]') FROM json_each(:items) AS u
             WHERE json_extract(u.value, '$[1]') = jobs.dispatched_at);

-- name: reconcile
-- Due jobs published more than :older_than seconds ago and still not claimed:
-- undispatched again (up to :limit), so the relay publishes them anew.
UPDATE jobs SET dispatched_at = NULL
WHERE id IN (SELECT x.id FROM jobs AS x
             WHERE x.state IN ('waiting', 'delayed') AND x.run_at <= :now
               AND x.dispatched_at >= x.run_at AND x.dispatched_at < :now - :older_than
             LIMIT :limit)
RETURNING id;

-- name: expire
-- The broker dead-lettered the message of job :id published at :stamp: the job
-- fails 'expired' with error message :message, only if that publish is still
-- its current dispatch, it is still waiting or delayed and no claim took it
-- since (started_at is set by every claim and never cleared).
UPDATE jobs SET
    state = 'failed',
    failure_reason = 'expired',
    finished_at = :now,
    errors = CASE
        WHEN json_valid(errors) AND json_type(errors) = 'array'
            THEN json_insert(errors, '$[#]', json_object(
                'type', 'Expired', 'message', :message, 'traceback', '',
                'attempt', attempts, 'reason', 'expired', 'at', :now))
        ELSE json_array(json_object(
                'type', 'Expired', 'message', :message, 'traceback', '',
                'attempt', attempts, 'reason', 'expired', 'at', :now))
    END
WHERE id = :id AND dispatched_at = :stamp
  AND state IN ('waiting', 'delayed')
  AND (started_at IS NULL OR started_at < dispatched_at)
RETURNING
    id, task, queue, state, priority, attempts, max_attempts, timeout, run_at, created_at,
    started_at, finished_at, expires_at, ttl, lease_until, lease_token, worker_id, stalls,
    failure_reason, idempotency_key, tenant, retried_as, retry_of, cancel_requested,
    payload, metadata, result, progress, errors, depends_on, on_dependency_failure,
    workflow_id, concurrency_key, rate_limit_key;

-- name: lag
-- Seconds the oldest undispatched due job has waited for its publish (0: none).
SELECT coalesce(:now - min(j.run_at), 0.0)
FROM jobs AS j
WHERE j.state IN ('waiting', 'delayed')
  AND (j.dispatched_at IS NULL OR j.dispatched_at < j.run_at)
  AND j.run_at <= :now;

-- name: ensure_counts
-- What every process's dispatch roles did, as running totals (conveyor serve's
-- /metrics); made by the first process that counts.
CREATE TABLE IF NOT EXISTS dispatch_counts (
    kind    TEXT    NOT NULL,
    outcome TEXT    NOT NULL,
    total   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (kind, outcome)
) WITHOUT ROWID;

-- name: add_counts
-- Add n to the totals of (kind, outcome); :items is a JSON array of
-- [kind, outcome, n].
INSERT INTO dispatch_counts (kind, outcome, total)
SELECT json_extract(u.value, '$[0]'), json_extract(u.value, '$[1]'),
       json_extract(u.value, '$[2]')
FROM json_each(:items) AS u WHERE true
ON CONFLICT (kind, outcome) DO UPDATE SET total = total + excluded.total;

-- name: has_counts
SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'dispatch_counts';

-- name: counts
SELECT kind, outcome, total FROM dispatch_counts;

-- name: next_due
-- When the next undispatched job comes due (NULL: none).
SELECT min(j.run_at)
FROM jobs AS j
WHERE j.state IN ('waiting', 'delayed')
  AND (j.dispatched_at IS NULL OR j.dispatched_at < j.run_at);
