-- The relay, reconciler and dead-letter handler of RabbitMQ dispatch
-- (conveyor.dispatch, docs/explanation/rabbitmq.md). Not part of any hot path:
-- a store that never dispatches never runs these.
--
-- "Undispatched" = due (waiting, or delayed with run_at passed: only a claim
-- promotes) and never published since it became due: dispatched_at is NULL or
-- older than run_at (a retry moves run_at past it).

-- name: ensure_index
CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_dispatch ON __schema__.jobs (run_at)
WHERE state IN ('waiting', 'delayed') AND (dispatched_at IS NULL OR dispatched_at < run_at);

-- name: take
-- Mark up to $1 undispatched jobs due for at least $2 seconds dispatched now
-- and return them, oldest first (a worker woken by the store's own NOTIFY
-- claims a fresh job first; a take would lock its row under that claim). Rows
-- another relay holds are skipped: many relays are safe. Marked before the
-- publish, so a relay that dies in between leaves a job the reconciler
-- republishes.
WITH t AS (SELECT extract(epoch FROM clock_timestamp())::float8 AS now)
UPDATE __schema__.jobs AS j SET dispatched_at = t.now
FROM t
WHERE j.id IN (SELECT x.id FROM __schema__.jobs AS x, t
               WHERE x.state IN ('waiting', 'delayed')
                 AND (x.dispatched_at IS NULL OR x.dispatched_at < x.run_at)
                 AND x.run_at <= t.now - $2::float8
               ORDER BY x.run_at
               LIMIT $1::integer
               FOR UPDATE OF x SKIP LOCKED)
RETURNING j.id, j.queue, j.expires_at, j.dispatched_at;

-- name: untake
-- Publishing $1 failed: undispatched again, unless dispatched since ($2 = the
-- stamps they were taken with).
UPDATE __schema__.jobs AS j SET dispatched_at = NULL
FROM unnest($1::text[], $2::float8[]) AS u(id, stamp)
WHERE j.id = u.id AND j.dispatched_at = u.stamp;

-- name: reconcile
-- Due jobs published more than $1 seconds ago and still not claimed: their
-- message may be lost (a publish lost, a broker restarted without it, a queue
-- purged). Undispatched again (up to $2), so the relay publishes them anew.
WITH t AS (SELECT extract(epoch FROM clock_timestamp())::float8 AS now)
UPDATE __schema__.jobs AS j SET dispatched_at = NULL
FROM t
WHERE j.id IN (SELECT x.id FROM __schema__.jobs AS x, t
               WHERE x.state IN ('waiting', 'delayed') AND x.run_at <= t.now
                 AND x.dispatched_at >= x.run_at AND x.dispatched_at < t.now - $1::float8
               LIMIT $2::integer
               FOR UPDATE OF x SKIP LOCKED)
RETURNING j.id;

-- name: expire
-- The broker dead-lettered the message of job $1 published at $2: the job
-- fails 'expired' with error message $3, only if that publish is still its
-- current dispatch, it is still waiting or delayed and no claim took it since
-- (started_at is set by every claim and never cleared): running, terminal,
-- re-dispatched jobs and jobs claimed then released or retried are untouched.
WITH t AS (SELECT extract(epoch FROM clock_timestamp())::float8 AS now)
UPDATE __schema__.jobs AS j SET
    state = 'failed',
    failure_reason = 'expired',
    finished_at = t.now,
    errors = (CASE WHEN jsonb_typeof(j.errors) = 'array' THEN j.errors ELSE '[]'::jsonb END)
        || jsonb_build_array(jsonb_build_object(
            'type', 'Expired', 'message', $3::text, 'traceback', '',
            'attempt', j.attempts, 'reason', 'expired', 'at', t.now))
FROM t
WHERE j.id = $1::text AND j.dispatched_at = $2::float8
  AND j.state IN ('waiting', 'delayed')
  AND (j.started_at IS NULL OR j.started_at < j.dispatched_at)
RETURNING j.*;

-- name: lag
-- Seconds the oldest undispatched due job has waited for its publish (0: none).
SELECT coalesce(extract(epoch FROM clock_timestamp())::float8 - min(j.run_at), 0.0)
FROM __schema__.jobs AS j
WHERE j.state IN ('waiting', 'delayed')
  AND (j.dispatched_at IS NULL OR j.dispatched_at < j.run_at)
  AND j.run_at <= extract(epoch FROM clock_timestamp())::float8;

-- name: ensure_counts
-- What every process's dispatch roles did, as running totals (conveyor serve's
-- /metrics). The dispatch layer's own table, made by the first process that
-- counts: a store that never dispatches never has it.
CREATE TABLE IF NOT EXISTS __schema__.dispatch_counts (
    kind text NOT NULL,
    outcome text NOT NULL,
    total bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (kind, outcome)
);

-- name: add_counts
-- Add $3 to the totals of ($1, $2) pairs, one row each (a process flushes about
-- once a second, so many processes do not contend on these rows).
INSERT INTO __schema__.dispatch_counts AS c (kind, outcome, total)
SELECT u.kind, u.outcome, u.n
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(kind, outcome, n)
ON CONFLICT (kind, outcome) DO UPDATE SET total = c.total + excluded.total;

-- name: has_counts
SELECT to_regclass('__schema__.dispatch_counts') IS NOT NULL;

-- name: counts
SELECT c.kind, c.outcome, c.total FROM __schema__.dispatch_counts AS c;

-- name: next_due
-- When the next undispatched job comes due (NULL: none), from the relay's
-- partial index: the relay sleeps until then unless a NOTIFY wakes it.
SELECT min(j.run_at)
FROM __schema__.jobs AS j
WHERE j.state IN ('waiting', 'delayed')
  AND (j.dispatched_at IS NULL OR j.dispatched_at < j.run_at);
