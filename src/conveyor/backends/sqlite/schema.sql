-- The current full schema of the conveyor SQLite backend (snapshot).
--
-- Equal to every file in migrations/ applied in order; a test
-- (tests/migrations/test_sqlite_migrations.py) holds the two together. Read
-- this file to see the schema; change it only together with a new migration.

-- One row per job. Small, hot columns first; the JSON blobs last, so reading
-- the state or the lease never walks into a payload's overflow pages.
-- ttl is the effective TTL (the smaller of the job's and its queue's at
-- enqueue); expires_at = start of the current wait + ttl, re-set on each wait.
CREATE TABLE jobs (
    id               TEXT    NOT NULL PRIMARY KEY,
    task             TEXT    NOT NULL,
    queue            TEXT    NOT NULL,
    state            TEXT    NOT NULL,
    priority         INTEGER NOT NULL DEFAULT 0,
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL DEFAULT 3,
    timeout          REAL,
    ttl              REAL,
    run_at           REAL    NOT NULL,
    created_at       REAL    NOT NULL,
    started_at       REAL,
    finished_at      REAL,
    expires_at       REAL,
    lease_until      REAL,
    lease_token      TEXT,
    worker_id        TEXT,
    stalls           INTEGER NOT NULL DEFAULT 0,
    failure_reason   TEXT,
    idempotency_key  TEXT,
    tenant           TEXT,
    retried_as       TEXT,
    retry_of         TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    payload          BLOB    NOT NULL,
    metadata         BLOB,
    result           BLOB,
    progress         BLOB,
    errors           TEXT
    -- Added by 0004 (dependencies). ALTER TABLE ADD COLUMN stores each added
    -- column as ", name type" at the end, hence the leading comma.
    -- depends_on: a JSON array of ids (NULL: none); on_dependency_failure:
    -- 'cancel' or 'run'; has_dependents: 1 once a blocked job waits for this
    -- one (the operations that finish a job look for dependents only then).
    , depends_on TEXT,
    on_dependency_failure TEXT NOT NULL DEFAULT 'cancel',
    workflow_id TEXT,
    has_dependents INTEGER NOT NULL DEFAULT 0,
    -- Added by 0005 (flow control): the group ClaimRequest.key_limits counts
    -- the task's active jobs in (NULL: the task's one shared group).
    concurrency_key TEXT,
    -- Added by 0007 (rate limits per key): the window
    -- ClaimRequest.key_rate_limits counts the job's start in (NULL: the
    -- task's one shared window).
    rate_limit_key TEXT,
    -- Added by 0009 (RabbitMQ dispatch): when a relay last published the
    -- job's message (NULL: never since it became due).
    dispatched_at REAL,
    -- Added by 0010: 1 while the job's queue is fair (set at enqueue, copied
    -- by a retry, rewritten for the queue's jobs when its fairness changes).
    fair INTEGER
);

-- No index on (state, queue): every state change would pay for it. Each state
-- has its own partial index instead, and the counts per queue and state read
-- them (index-only): waiting from jobs_claim, delayed from jobs_delayed, active
-- from jobs_lease, blocked from jobs_blocked, terminal states from jobs_finished.
--
-- Claim: the next waiting jobs of one queue in claim order.
CREATE INDEX jobs_claim ON jobs (queue, priority DESC, run_at, id) WHERE state = 'waiting';
-- Delayed promotion: an index-only no-op when nothing is due.
CREATE INDEX jobs_delayed ON jobs (run_at, queue) WHERE state = 'delayed';
-- TTL expiry: only waiting jobs that have a TTL at all.
CREATE INDEX jobs_expiry ON jobs (expires_at) WHERE state = 'waiting' AND expires_at IS NOT NULL;
-- Stall recovery: active jobs by lease end.
CREATE INDEX jobs_lease ON jobs (lease_until, queue) WHERE state = 'active';
-- Retention (finished jobs of a state by age), the dead-letter queue.
CREATE INDEX jobs_finished ON jobs (state, finished_at, queue) WHERE finished_at IS NOT NULL;
-- Listing walks the primary key newest first (ids increase in creation order,
-- see ids.py), so it needs no index of its own; tenant filters have one.
CREATE INDEX jobs_tenant ON jobs (tenant, id) WHERE tenant IS NOT NULL;
-- Blocked jobs, for the counts per queue and state (index-only).
CREATE INDEX jobs_blocked ON jobs (queue) WHERE state = 'blocked';
-- A capped claim's count of active jobs per (task, concurrency_key). Keyed jobs
-- only: a job without a key pays nothing more to be claimed or settled (the
-- keyless group is counted through jobs_lease).
CREATE INDEX jobs_key_active ON jobs (task, concurrency_key)
    WHERE state = 'active' AND concurrency_key IS NOT NULL;
-- The jobs of a workflow (added by 0008): get_workflow, the workflow events'
-- counts and workflow retention. Only workflow jobs, and no state column: a
-- claim or settle does not touch it.
CREATE INDEX jobs_workflow ON jobs (workflow_id, id) WHERE workflow_id IS NOT NULL;

-- Fair claims: each tenant's first waiting job in claim order (0006); only
-- the jobs of fair queues (0010).
CREATE INDEX jobs_fair ON jobs (queue, tenant, priority DESC, run_at, id)
    WHERE state = 'waiting' AND fair = 1;

-- The dependencies a blocked job still waits for, one row per (dependency,
-- dependent). Written at enqueue for the dependencies not finished yet; a
-- dependency's rows are deleted when it finishes (its dependents are resolved
-- then), so a blocked job with no row left has all its dependencies finished.
CREATE TABLE job_dependencies (
    dependency_id TEXT NOT NULL,
    job_id        TEXT NOT NULL,
    PRIMARY KEY (dependency_id, job_id)
) WITHOUT ROWID;
-- Whether a blocked job still waits for anything.
CREATE INDEX job_dependencies_job ON job_dependencies (job_id);

-- Idempotency keys outlive their job's row: final_state remembers how the job
-- ended when retention (or a delete) removed it.
CREATE TABLE idempotency_keys (
    key         TEXT NOT NULL PRIMARY KEY,
    job_id      TEXT NOT NULL,
    task        TEXT NOT NULL,
    queue       TEXT NOT NULL,
    final_state TEXT,
    expires_at  REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

-- Configured queues (a queue with jobs but no row has the defaults).
CREATE TABLE queues (
    name     TEXT    NOT NULL PRIMARY KEY,
    paused   INTEGER NOT NULL DEFAULT 0,
    max_size INTEGER,
    ttl      REAL
    -- Added by 0006 (fair queues): fairness NULL (plain) or 'tenant'; weights
    -- a JSON object tenant -> weight (NULL: all weigh 1); vtime the virtual time.
    , fairness TEXT,
    weights TEXT,
    vtime REAL NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- The tenants of a fair queue that may have waiting jobs, with their pass of
-- the rule (0 for a new one). tenant_key: '' for no tenant, '=' || tenant
-- otherwise (a key that sorts as the rule orders tenants). Rows are added by
-- the triggers fair_tenant_inserted / fair_tenant_waiting (end of this file)
-- and dropped by the claim once nothing waits and pass <= vtime.
CREATE TABLE fair_tenants (
    queue      TEXT NOT NULL,
    tenant_key TEXT NOT NULL,
    pass       REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, tenant_key)
) WITHOUT ROWID;

-- A fair claim reads the tenants ahead of vtime in pass order.
CREATE INDEX fair_tenants_pass ON fair_tenants (queue, pass, tenant_key);

-- Circuit breakers, per task (no row = closed, no failures).
CREATE TABLE circuits (
    task       TEXT    NOT NULL PRIMARY KEY,
    state      TEXT    NOT NULL DEFAULT 'closed',
    failures   INTEGER NOT NULL DEFAULT 0,
    open_for   REAL,
    open_until REAL
) WITHOUT ROWID;

-- Sliding-window rate limits: a log of starts (n jobs of a task at one time).
CREATE TABLE rate_starts (
    task   TEXT    NOT NULL,
    at     REAL    NOT NULL,
    n      INTEGER NOT NULL,
    period REAL    NOT NULL
);
CREATE INDEX rate_starts_task ON rate_starts (task, at);

-- Sliding windows per (task, rate_limit_key) (0006): like rate_starts, one
-- log per key (rate_key NULL: the keyless window).
CREATE TABLE rate_key_starts (
    task     TEXT    NOT NULL,
    rate_key TEXT,
    at       REAL    NOT NULL,
    n        INTEGER NOT NULL,
    period   REAL    NOT NULL
);
CREATE INDEX rate_key_starts_window ON rate_key_starts (task, rate_key, at);

-- Worker heartbeats. heartbeat_interval is the worker's own: readers judge
-- its liveness with it (alive while last_seen is younger than 3 intervals).
CREATE TABLE workers (
    id                 TEXT NOT NULL PRIMARY KEY,
    info               TEXT NOT NULL,
    last_seen          REAL NOT NULL,
    heartbeat_interval REAL NOT NULL DEFAULT 10.0
) WITHOUT ROWID;

-- Schedules (see schedules.py): the definition the app's code declares (spec_*,
-- task, payload, options, fingerprint) and the state operators and schedulers
-- change. cron/every hold the expression in force (the spec's, or a set-cron
-- override); next_fire_at is NULL once the schedule is finished.
CREATE TABLE schedules (
    name         TEXT    NOT NULL PRIMARY KEY,
    task         TEXT    NOT NULL,
    payload      BLOB    NOT NULL,
    spec_cron    TEXT,
    spec_every   REAL,
    timezone     TEXT    NOT NULL,
    start_at     REAL,
    end_at       REAL,
    fire_limit   INTEGER,
    misfire      TEXT    NOT NULL,
    options      BLOB    NOT NULL,
    fingerprint  TEXT    NOT NULL,
    cron         TEXT,
    every        REAL,
    paused       INTEGER NOT NULL DEFAULT 0,
    next_fire_at REAL,
    fires        INTEGER NOT NULL DEFAULT 0,
    last_fire_at REAL,
    updated_at   REAL    NOT NULL
) WITHOUT ROWID;

-- Job statistics reported by workers (see stats.sql): cumulative totals per
-- (task, queue, status) for /metrics, and per-minute series rows pruned by age.
CREATE TABLE job_stat_totals (
    task         TEXT    NOT NULL,
    queue        TEXT    NOT NULL,
    status       TEXT    NOT NULL,
    count        INTEGER NOT NULL DEFAULT 0,
    duration_sum REAL    NOT NULL DEFAULT 0,
    buckets      TEXT    NOT NULL,
    PRIMARY KEY (task, queue, status)
) WITHOUT ROWID;

CREATE TABLE job_stat_series (
    minute       REAL    NOT NULL,
    task         TEXT    NOT NULL,
    queue        TEXT    NOT NULL,
    status       TEXT    NOT NULL,
    count        INTEGER NOT NULL DEFAULT 0,
    duration_sum REAL    NOT NULL DEFAULT 0,
    buckets      TEXT    NOT NULL,
    PRIMARY KEY (minute, task, queue, status)
) WITHOUT ROWID;

-- A job of a fair queue that becomes waiting registers its tenant (0006); the
-- job's own flag says so, a plain job looks nothing up (0010).
CREATE TRIGGER fair_tenant_inserted AFTER INSERT ON jobs
WHEN NEW.fair = 1 AND NEW.state = 'waiting'
BEGIN
    INSERT OR IGNORE INTO fair_tenants (queue, tenant_key)
    VALUES (NEW.queue, ifnull('=' || NEW.tenant, ''));
END;

CREATE TRIGGER fair_tenant_waiting AFTER UPDATE OF state ON jobs
WHEN NEW.fair = 1 AND NEW.state = 'waiting' AND OLD.state <> 'waiting'
BEGIN
    INSERT OR IGNORE INTO fair_tenants (queue, tenant_key)
    VALUES (NEW.queue, ifnull('=' || NEW.tenant, ''));
END;
