-- The current full schema of the conveyor PostgreSQL backend (snapshot).
--
-- Equal to every file in migrations/ applied in order (schema_migrations aside);
-- tests/migrations/test_postgres_migrations.py compares the catalogs. Change it
-- only together with a new migration.

CREATE TABLE __schema__.jobs (
    id               text COLLATE "C" NOT NULL PRIMARY KEY,
    task             text COLLATE "C" NOT NULL,
    queue            text COLLATE "C" NOT NULL,
    state            text NOT NULL CHECK (state IN ('blocked', 'waiting', 'delayed', 'active', 'completed', 'failed', 'cancelled')),
    priority         integer NOT NULL DEFAULT 0,
    attempts         integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL DEFAULT 3,
    timeout          float8,
    run_at           float8 NOT NULL,
    created_at       float8 NOT NULL,
    started_at       float8,
    finished_at      float8,
    expires_at       float8,
    ttl              float8,
    lease_until      float8,
    lease_token      text COLLATE "C",
    worker_id        text,
    stalls           integer NOT NULL DEFAULT 0,
    failure_reason   text,
    idempotency_key  text,
    tenant           text,
    retried_as       text COLLATE "C",
    retry_of         text COLLATE "C",
    cancel_requested boolean NOT NULL DEFAULT false,
    payload          bytea NOT NULL,
    metadata         bytea,
    result           bytea,
    progress         bytea,
    errors           jsonb,
    depends_on       text[],
    on_dependency_failure text,
    workflow_id      text,
    has_dependents   boolean NOT NULL DEFAULT false,
    dispatched_at    float8,
    concurrency_key  text,
    rate_limit_key   text,
    fair             boolean NOT NULL DEFAULT false
) WITH (fillfactor = 90, autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);

-- Every state has its own partial index, so the waiting jobs' index stays the
-- size of the backlog however many finished rows are kept. Each also carries
-- the queue, so the counts per queue and state can read indexes only.
-- Claim: the next waiting jobs of one queue in claim order.
CREATE INDEX jobs_claim ON __schema__.jobs (queue, priority DESC, run_at, id) WHERE state = 'waiting';
-- Delayed promotion (by run_at) and the next due time per queue.
CREATE INDEX jobs_delayed ON __schema__.jobs (run_at, queue) WHERE state = 'delayed';
-- TTL expiry: only waiting jobs that have a TTL at all.
CREATE INDEX jobs_expiry ON __schema__.jobs (expires_at) WHERE state = 'waiting' AND expires_at IS NOT NULL;
-- Stall recovery: active jobs by lease end.
CREATE INDEX jobs_lease ON __schema__.jobs (lease_until, queue) WHERE state = 'active';
-- Retention and the dead-letter queue: finished jobs of a state by age.
CREATE INDEX jobs_finished ON __schema__.jobs (state, finished_at, queue) WHERE finished_at IS NOT NULL;
-- Tenant filters.
CREATE INDEX jobs_tenant ON __schema__.jobs (tenant, id) WHERE tenant IS NOT NULL;
-- Blocked jobs: by id (a lookup of "this job, if blocked" stays a lookup by
-- key whichever index the planner takes) and per queue (counts, index-only).
CREATE INDEX jobs_blocked ON __schema__.jobs (id) INCLUDE (queue) WHERE state = 'blocked';
-- The jobs of a workflow.
CREATE INDEX jobs_workflow ON __schema__.jobs (workflow_id, id) WHERE workflow_id IS NOT NULL;
-- Per-key caps: a group's active jobs (only jobs that have a key; a capped
-- task's keyless group is counted through jobs_lease).
CREATE INDEX jobs_key_active ON __schema__.jobs (task, concurrency_key)
    WHERE state = 'active' AND concurrency_key IS NOT NULL;
-- Fair queues: a queue's tenants with waiting jobs, and each one's next job
-- in claim order (tenant names bytewise, the rule's order). Only the jobs of
-- fair queues (fair: set at enqueue, rewritten when a queue's fairness changes).
CREATE INDEX jobs_fair ON __schema__.jobs (queue, tenant COLLATE "C", priority DESC, run_at, id)
    WHERE state = 'waiting' AND fair;

-- Which blocked jobs wait on a job: a row per (unfinished dependency, blocked
-- job), deleted once that dependency has finished and been resolved.
CREATE TABLE __schema__.job_dependencies (
    depends_on text COLLATE "C" NOT NULL,
    job_id     text COLLATE "C" NOT NULL,
    PRIMARY KEY (depends_on, job_id)
);

-- Idempotency keys outlive their job's row: final_state remembers how the job
-- ended when retention (or a delete) removed it.
CREATE TABLE __schema__.idempotency_keys (
    key         text NOT NULL PRIMARY KEY,
    job_id      text NOT NULL,
    task        text NOT NULL,
    queue       text NOT NULL,
    final_state text,
    expires_at  float8 NOT NULL
);
CREATE INDEX idempotency_keys_expiry ON __schema__.idempotency_keys (expires_at);

-- Configured queues (a queue with jobs but no row has the defaults).
CREATE TABLE __schema__.queues (
    name     text COLLATE "C" NOT NULL PRIMARY KEY,
    paused   boolean NOT NULL DEFAULT false,
    max_size integer,
    ttl      float8,
    fairness text,
    weights  jsonb NOT NULL DEFAULT '{}',
    vtime    float8 NOT NULL DEFAULT 0
);

-- Fair queues: each tenant's pass (NULL: the tenant-less jobs), updated in
-- place by claims; maintenance drops those at or below their queue's vtime.
CREATE TABLE __schema__.fair_tenants (
    queue  text COLLATE "C" NOT NULL,
    tenant text COLLATE "C",
    pass   float8 NOT NULL
) WITH (fillfactor = 50);
CREATE UNIQUE INDEX fair_tenants_key ON __schema__.fair_tenants (queue, tenant);

-- Circuit breakers, per task (no row = closed, no failures).
CREATE TABLE __schema__.circuits (
    task       text COLLATE "C" NOT NULL PRIMARY KEY,
    state      text NOT NULL DEFAULT 'closed',
    failures   integer NOT NULL DEFAULT 0,
    open_for   float8,
    open_until float8
);

-- Sliding-window rate limits: a log of starts (n jobs of a task at one time).
CREATE TABLE __schema__.rate_starts (
    task   text COLLATE "C" NOT NULL,
    at     float8 NOT NULL,
    n      integer NOT NULL,
    period float8 NOT NULL
);
CREATE INDEX rate_starts_task ON __schema__.rate_starts (task, at);

-- Sliding windows per (task, rate_limit_key) (version 8): a log of starts like
-- rate_starts, one per key (rate_key NULL: the keyless window), kept apart so
-- the per-task windows' statements stay as they are.
CREATE TABLE __schema__.rate_key_starts (
    task     text COLLATE "C" NOT NULL,
    rate_key text COLLATE "C",
    at       float8 NOT NULL,
    n        integer NOT NULL,
    period   float8 NOT NULL
);
CREATE INDEX rate_key_starts_window ON __schema__.rate_key_starts (task, rate_key, at);

-- Worker heartbeats (info: the rest of WorkerInfo as JSON).
CREATE TABLE __schema__.workers (
    id                 text NOT NULL PRIMARY KEY,
    info               bytea NOT NULL,
    last_seen          float8 NOT NULL,
    heartbeat_interval float8 NOT NULL DEFAULT 10.0
);

-- Schedules: the code's definition (spec_*) and what operators and schedulers change.
CREATE TABLE __schema__.schedules (
    name         text NOT NULL PRIMARY KEY,
    task         text NOT NULL,
    payload      bytea NOT NULL,
    spec_cron    text,
    spec_every   float8,
    timezone     text NOT NULL DEFAULT 'UTC',
    start_at     float8,
    end_at       float8,
    fire_limit   integer,
    misfire      text NOT NULL DEFAULT 'skip',
    options      bytea NOT NULL,
    fingerprint  text NOT NULL,
    cron         text,
    every        float8,
    paused       boolean NOT NULL DEFAULT false,
    next_fire_at float8,
    fires        integer NOT NULL DEFAULT 0,
    last_fire_at float8,
    updated_at   float8 NOT NULL
);

-- Job statistics: cumulative totals (never pruned) and per-minute series.
CREATE TABLE __schema__.job_stat_totals (
    task         text NOT NULL,
    queue        text NOT NULL,
    status       text NOT NULL,
    count        bigint NOT NULL,
    duration_sum float8 NOT NULL,
    buckets      bigint[] NOT NULL,
    PRIMARY KEY (task, queue, status)
);
CREATE TABLE __schema__.job_stat_series (
    minute       float8 NOT NULL,
    task         text NOT NULL,
    queue        text NOT NULL,
    status       text NOT NULL,
    count        bigint NOT NULL,
    duration_sum float8 NOT NULL,
    buckets      bigint[] NOT NULL,
    PRIMARY KEY (minute, task, queue, status)
);


-- enqueue: insert a batch atomically (arrays, one element per job; a NULL
-- array means "none for every job"). Returns one 'now' row (the server clock
-- the batch was stamped with), a 'ttl' row per queue of the batch that has a
-- TTL, and a 'dup' row per job whose idempotency key is live (out_ord = its
-- 1-based position; the key's job id, task, queue and final state). Keys are
-- taken with INSERT .. ON CONFLICT, so concurrent batches with one key make
-- exactly one job. A queue over its max_size raises SQLSTATE CVQFL (detail:
-- the queue, hint: max_size) and the whole batch rolls back.
--
-- Dependencies (version 3): p_dep_of, p_dep_ids and p_dep_pos hold one element
-- per (job, dependency), grouped by job in batch order: the job's 1-based
-- position, the dependency's id, and the dependency's position when it is an
-- earlier job of the batch (else NULL: a stored job). Stored dependencies are
-- locked, so none finishes unseen before the batch commits; an unknown one
-- raises SQLSTATE CVDEP (detail: its id) and nothing is stored. A job with
-- dependencies is stored blocked, or cancelled (dependency_failed) when one
-- failed or was cancelled under policy cancel (p_policies NULL: cancel), or as
-- usual; a 'state' row (out_ord, out_state) reports each job not stored as usual.
--
-- Flow control (version 6): p_concurrency_keys is stored as concurrency_key.
-- p_debounces (seconds; with a key): a debounced job is stored delayed until
-- now + debounce. When its key is live and the key's job has not started
-- (waiting or delayed), that job takes the new payload and metadata instead,
-- delayed until now + debounce (expires_at from then, its dispatch undone),
-- the key's expiry is renewed and a 'dup' row reports it; when the key's job
-- started, finished or is gone, a new job is stored and the key points at it.
-- The key row is locked by the INSERT .. ON CONFLICT (live or not), so
-- enqueues of one key take turns; the job row is locked by the UPDATE, so a
-- claim either took the job first (then it is active: a new job is stored)
-- or skips it until this batch commits.
CREATE FUNCTION __schema__.enqueue(
    p_ids text[], p_tasks text[], p_queues text[], p_payloads bytea[], p_priorities integer[],
    p_max_attempts integer[], p_timeouts float8[], p_delays float8[], p_run_ats float8[],
    p_ttls float8[], p_keys text[], p_key_ttls float8[], p_tenants text[], p_metadata bytea[],
    p_retry_of text[], p_policies text[], p_workflows text[],
    p_dep_of integer[], p_dep_ids text[], p_dep_pos integer[],
    p_concurrency_keys text[], p_debounces float8[]
) RETURNS TABLE (out_kind text, out_ord integer, out_id text, out_task text, out_queue text,
                 out_state text, out_value float8)
LANGUAGE plpgsql AS $$
DECLARE
    v_now float8 := extract(epoch FROM clock_timestamp())::float8;
    v_won text[] := '{}';
    v_dups integer[] := '{}';
    v_pending bigint;
    -- Per job position: its state when not the usual one ('blocked',
    -- 'cancelled'), whether a blocked job of the batch waits on it, and its
    -- depends_on as a slice of p_dep_ids.
    v_states text[] := '{}';
    v_parent boolean[] := '{}';
    v_first integer[] := '{}';
    v_last integer[] := '{}';
    v_stored jsonb;
    v_dep_state text;
    v_flag text[] := '{}';
    v_edge_deps text[] := '{}';
    v_edge_jobs text[] := '{}';
    v_ord integer;
    v_pos integer;
    i integer;
    r record;
BEGIN
    out_kind := 'now';
    out_value := v_now;
    RETURN NEXT;
    RETURN QUERY
        SELECT 'ttl'::text, NULL::integer, NULL::text, NULL::text, q.name::text, NULL::text, q.ttl
        FROM __schema__.queues AS q
        WHERE q.name = ANY (p_queues) AND q.ttl IS NOT NULL;

    IF p_keys IS NOT NULL THEN
        WITH k AS (
            SELECT * FROM unnest(p_keys, p_ids, p_tasks, p_queues, p_key_ttls)
                AS k(key, id, task, queue, ttl)
            WHERE k.key IS NOT NULL
        ), won AS (
            INSERT INTO __schema__.idempotency_keys AS ik (key, job_id, task, queue, final_state, expires_at)
            SELECT k.key, k.id, k.task, k.queue, NULL, v_now + coalesce(k.ttl, 86400.0)
            FROM k
            ORDER BY k.key
            ON CONFLICT (key) DO UPDATE SET
                job_id = excluded.job_id, task = excluded.task, queue = excluded.queue,
                final_state = NULL, expires_at = excluded.expires_at
            WHERE ik.expires_at <= v_now
            RETURNING ik.key
        )
        SELECT coalesce(array_agg(won.key), '{}') INTO v_won FROM won;

        FOR r IN
            SELECT k.ord::integer AS ord, ik.job_id, ik.task, ik.queue, ik.final_state
            FROM unnest(p_keys) WITH ORDINALITY AS k(key, ord)
            JOIN __schema__.idempotency_keys AS ik ON ik.key = k.key
            WHERE k.key IS NOT NULL AND k.key <> ALL (v_won)
        LOOP
            IF p_debounces[r.ord] IS NOT NULL THEN
                UPDATE __schema__.jobs AS j SET
                    state = 'delayed',
                    payload = p_payloads[r.ord],
                    metadata = p_metadata[r.ord],
                    run_at = v_now + p_debounces[r.ord],
                    expires_at = v_now + p_debounces[r.ord] + j.ttl,
                    dispatched_at = NULL
                WHERE j.id = r.job_id AND j.state IN ('waiting', 'delayed');
                IF FOUND THEN
                    UPDATE __schema__.idempotency_keys AS ik
                    SET expires_at = greatest(ik.expires_at,
                                              v_now + coalesce(p_key_ttls[r.ord], 86400.0))
                    WHERE ik.key = p_keys[r.ord];
                ELSE
                    -- Started, finished or gone: this job is stored and takes the key.
                    UPDATE __schema__.idempotency_keys AS ik
                    SET job_id = p_ids[r.ord], task = p_tasks[r.ord], queue = p_queues[r.ord],
                        final_state = NULL,
                        expires_at = v_now + coalesce(p_key_ttls[r.ord], 86400.0)
                    WHERE ik.key = p_keys[r.ord];
                    CONTINUE;
                END IF;
            END IF;
            v_dups := v_dups || r.ord;
            out_kind := 'dup';
            out_ord := r.ord;
            out_id := r.job_id;
            out_task := r.task;
            out_queue := r.queue;
            out_state := r.final_state;
            out_value := NULL;
            RETURN NEXT;
        END LOOP;
    END IF;

    -- Backpressure: one batch at a time per bounded queue (an advisory lock),
    -- so two producers cannot both take the last free place.
    FOR r IN
        SELECT q.name, q.max_size, count(*) AS n
        FROM unnest(p_queues) WITH ORDINALITY AS b(queue, ord)
        JOIN __schema__.queues AS q ON q.name = b.queue
        WHERE q.max_size IS NOT NULL AND b.ord <> ALL (v_dups)
        GROUP BY q.name, q.max_size
        ORDER BY q.name
    LOOP
        PERFORM pg_advisory_xact_lock(hashtextextended('__channel__/queue/' || r.name, 0));
        SELECT count(*) INTO v_pending FROM __schema__.jobs AS j
        WHERE j.state IN ('waiting', 'delayed') AND j.queue = r.name;
        IF v_pending + r.n > r.max_size THEN
            RAISE EXCEPTION 'queue % is full (max_size=%)', r.name, r.max_size
                USING ERRCODE = 'CVQFL', DETAIL = r.name, HINT = r.max_size::text;
        END IF;
    END LOOP;

    IF p_dep_ids IS NOT NULL THEN
        -- Stored dependencies, locked (running ones before blocked ones, each
        -- in id order, as a settle that releases blocked jobs locks them): a
        -- settle of one waits for this batch and then finds has_dependents set.
        SELECT coalesce(jsonb_object_agg(s.id, s.state), '{}') INTO v_stored
        FROM (SELECT j.id, j.state FROM __schema__.jobs AS j
              WHERE j.id IN (SELECT d.id FROM unnest(p_dep_ids, p_dep_pos) AS d(id, pos)
                             WHERE d.pos IS NULL OR d.pos = ANY (v_dups))
              ORDER BY j.state = 'blocked', j.id
              FOR NO KEY UPDATE) AS s;
        v_states := array_fill(NULL::text, ARRAY[cardinality(p_ids)]);
        v_parent := array_fill(false, ARRAY[cardinality(p_ids)]);
        v_first := array_fill(NULL::integer, ARRAY[cardinality(p_ids)]);
        v_last := v_first;
        -- Each job's state. Dependencies point back only and come grouped by
        -- job, so an earlier job's state is final when a later one reads it.
        FOR i IN 1 .. cardinality(p_dep_ids) LOOP
            v_ord := p_dep_of[i];
            CONTINUE WHEN v_ord = ANY (v_dups);  -- not stored: its key's job stands
            v_pos := p_dep_pos[i];
            v_first[v_ord] := coalesce(v_first[v_ord], i);
            v_last[v_ord] := i;
            IF v_pos IS NOT NULL AND v_pos <> ALL (v_dups) THEN
                v_dep_state := coalesce(v_states[v_pos], 'waiting');
            ELSE
                v_dep_state := v_stored ->> p_dep_ids[i];
                IF v_dep_state IS NULL THEN
                    RAISE EXCEPTION 'job % depends on %, which does not exist',
                        p_ids[v_ord], p_dep_ids[i]
                        USING ERRCODE = 'CVDEP', DETAIL = p_dep_ids[i];
                END IF;
            END IF;
            IF v_dep_state IN ('failed', 'cancelled') THEN
                IF p_policies[v_ord] IS DISTINCT FROM 'run' THEN
                    v_states[v_ord] := 'cancelled';
                END IF;
            ELSIF v_dep_state <> 'completed' AND v_states[v_ord] IS NULL THEN
                v_states[v_ord] := 'blocked';
            END IF;
        END LOOP;
        -- Blocked jobs wait on their unfinished dependencies: an edge each, and
        -- the dependency flagged (has_dependents) so that finishing it looks.
        FOR i IN 1 .. cardinality(p_dep_ids) LOOP
            v_ord := p_dep_of[i];
            CONTINUE WHEN v_states[v_ord] IS DISTINCT FROM 'blocked';
            v_pos := p_dep_pos[i];
            IF v_pos IS NOT NULL AND v_pos <> ALL (v_dups) THEN
                CONTINUE WHEN v_states[v_pos] = 'cancelled';
                v_parent[v_pos] := true;
            ELSE
                CONTINUE WHEN v_stored ->> p_dep_ids[i] IN ('completed', 'failed', 'cancelled');
                v_flag := v_flag || p_dep_ids[i];
            END IF;
            v_edge_deps := v_edge_deps || p_dep_ids[i];
            v_edge_jobs := v_edge_jobs || p_ids[v_ord];
        END LOOP;
        UPDATE __schema__.jobs AS j SET has_dependents = true
        WHERE j.id = ANY (v_flag) AND NOT j.has_dependents;
        INSERT INTO __schema__.job_dependencies (depends_on, job_id)
        SELECT DISTINCT e.dep, e.job FROM unnest(v_edge_deps, v_edge_jobs) AS e(dep, job)
        ON CONFLICT DO NOTHING;
        RETURN QUERY
            SELECT 'state'::text, s.ord::integer, NULL::text, NULL::text, NULL::text, s.state,
                   NULL::float8
            FROM unnest(v_states) WITH ORDINALITY AS s(state, ord)
            WHERE s.state IS NOT NULL;
    END IF;

    INSERT INTO __schema__.jobs (id, task, queue, state, priority, max_attempts, timeout, ttl,
                                 run_at, created_at, finished_at, expires_at, failure_reason,
                                 idempotency_key, tenant, retry_of, payload, metadata,
                                 depends_on, on_dependency_failure, workflow_id, has_dependents,
                                 concurrency_key, fair)
    SELECT b.id, b.task, b.queue,
           CASE WHEN v_states[b.ord] IS NOT NULL THEN v_states[b.ord]
                WHEN b.run_at > v_now THEN 'delayed' ELSE 'waiting' END,
           b.priority, b.max_attempts, b.timeout, b.ttl, b.run_at, v_now,
           CASE WHEN v_states[b.ord] = 'cancelled' THEN v_now END, b.run_at + b.ttl,
           CASE WHEN v_states[b.ord] = 'cancelled' THEN 'dependency_failed' END,
           b.key, b.tenant, b.retry_of, b.payload, b.metadata,
           p_dep_ids[v_first[b.ord]:v_last[b.ord]], b.policy, b.workflow,
           coalesce(v_parent[b.ord], false), b.concurrency_key, b.fair
    FROM (
        SELECT x.id, x.task, x.queue, x.priority, x.max_attempts, x.timeout,
               least(x.ttl, q.ttl) AS ttl,
               coalesce(v_now + x.debounce, x.run_at, v_now + coalesce(x.delay, 0.0)) AS run_at,
               x.key, x.tenant, x.retry_of, x.payload, x.metadata, x.policy, x.workflow,
               x.concurrency_key, x.ord::integer AS ord, q.fairness IS NOT NULL AS fair
        FROM unnest(p_ids, p_tasks, p_queues, p_payloads, p_priorities, p_max_attempts,
                    p_timeouts, p_delays, p_run_ats, p_ttls, p_keys, p_tenants, p_metadata,
                    p_retry_of, p_policies, p_workflows, p_concurrency_keys, p_debounces)
             WITH ORDINALITY AS x(id, task, queue, payload, priority, max_attempts, timeout,
                                  delay, run_at, ttl, key, tenant, metadata, retry_of, policy,
                                  workflow, concurrency_key, debounce, ord)
        LEFT JOIN __schema__.queues AS q ON q.name = x.queue
    ) AS b
    WHERE cardinality(v_dups) = 0 OR b.ord <> ALL (v_dups);

    -- One notification per queue per batch, delivered when the caller commits.
    PERFORM pg_notify('__channel__', q.queue)
    FROM (SELECT DISTINCT u.queue FROM unnest(p_queues) AS u(queue)) AS q;
END;
$$;


-- enqueue_plain: the common batch in one call: jobs that share task, queue,
-- priority, max_attempts and delay, with no other option (no key, TTL of their
-- own, timeout, tenant, metadata, run_at). Only ids and payloads are arrays.
-- Returns the server clock the batch was stamped with and the queue's TTL.
CREATE FUNCTION __schema__.enqueue_plain(
    p_ids text[], p_payloads bytea[], p_task text, p_queue text, p_priority integer,
    p_max_attempts integer, p_delay float8
) RETURNS TABLE (out_now float8, out_ttl float8)
LANGUAGE plpgsql AS $$
DECLARE
    v_now float8 := extract(epoch FROM clock_timestamp())::float8;
    v_run_at float8;
    v_ttl float8;
    v_max_size integer;
    v_pending bigint;
BEGIN
    v_run_at := v_now + p_delay;
    SELECT q.ttl, q.max_size INTO v_ttl, v_max_size
    FROM __schema__.queues AS q WHERE q.name = p_queue;
    IF v_max_size IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(hashtextextended('__channel__/queue/' || p_queue, 0));
        SELECT count(*) INTO v_pending FROM __schema__.jobs AS j
        WHERE j.state IN ('waiting', 'delayed') AND j.queue = p_queue;
        IF v_pending + cardinality(p_ids) > v_max_size THEN
            RAISE EXCEPTION 'queue % is full (max_size=%)', p_queue, v_max_size
                USING ERRCODE = 'CVQFL', DETAIL = p_queue, HINT = v_max_size::text;
        END IF;
    END IF;
    -- fair is read by the INSERT itself: a switch of the queue's fairness
    -- (configure_queue locks jobs) is either seen here or sees these rows.
    INSERT INTO __schema__.jobs (id, task, queue, state, priority, max_attempts, ttl, run_at,
                                 created_at, expires_at, payload, fair)
    SELECT x.id, p_task, p_queue,
           CASE WHEN v_run_at > v_now THEN 'delayed' ELSE 'waiting' END,
           p_priority, p_max_attempts, v_ttl, v_run_at, v_now, v_run_at + v_ttl, x.payload,
           f.fair
    FROM unnest(p_ids, p_payloads) AS x(id, payload),
         (SELECT EXISTS (SELECT 1 FROM __schema__.queues AS q
                         WHERE q.name = p_queue AND q.fairness IS NOT NULL)) AS f(fair);
    PERFORM pg_notify('__channel__', p_queue);
    out_now := v_now;
    out_ttl := v_ttl;
    RETURN NEXT;
END;
$$;

-- claim: promote due delayed jobs, expire TTL'd waiting ones, then claim up to
-- p_limit waiting jobs of the un-paused p_queues (priority DESC, run_at, id),
-- skipping open circuits (one trial job per circuit whose open period passed),
-- honouring per-task caps (p_cap_tasks/p_caps) and sliding-window rate limits
-- (p_rate_*). Returns the expired jobs (state failed) and the claimed ones
-- (state active). Every row it takes is locked FOR UPDATE SKIP LOCKED, so
-- concurrent claimers never wait on each other nor take the same job.
-- Version 3: an expired job others depend on resolves its blocked dependents.
-- Version 6: per-key caps (p_key_tasks/p_key_caps): at most that many active
-- jobs of the task per concurrency_key (NULL is one group), counting every
-- active job. Claimers that carry a cap for a task take turns on it (an
-- advisory lock per task, taken in task order after the rate limits' locks,
-- held until commit), so each counts a group's active jobs after the previous
-- claimer's jobs committed; a full group is left out of the candidate query
-- and the jobs behind it are claimed. Claims without p_key_tasks never look.
-- Version 7: fair queues (fairness set, not paused) yield their jobs weighted
-- round-robin across tenants (the rule in backends/base.py): claimers of a fair
-- queue take turns on it (an advisory lock per fair queue, in name order, after
-- the per-key locks), read its vtime (queues) and the passes of its candidate
-- tenants (fair_tenants), pick one job at a time -- the queue's streams merged by
-- their head job's usual key -- and write vtime and the passes back before
-- commit. Candidates are the distinct tenants with waiting jobs, found by a
-- loose index scan of jobs_fair (one probe per tenant, however deep a backlog);
-- a tenant whose first claimable job cannot be found drops out, without credit.
-- Claims of plain queues only look up which of their queues are fair.
-- Version 8: per-key rate limits (p_rkey_tasks/p_rkey_limits/p_rkey_periods):
-- at most that many starts of the task per rate_limit_key (NULL is one
-- window) in any sliding window of the period, logged in rate_key_starts.
-- Claimers that carry them for a task take turns on it (an advisory lock per
-- task, taken in task order after the key caps' locks, held until commit); a
-- spent window is left out of the candidate query and the jobs behind it are
-- claimed. In a fair queue they take the one-job-at-a-time path: a spent
-- window is left out of every head, so a tenant whose claimable jobs all sit
-- in spent windows drops out without credit, like one blocked by key caps.
-- Claims without p_rkey_tasks never look.
CREATE FUNCTION __schema__.claim(
    p_queues text[], p_limit integer, p_lease float8, p_worker text, p_token text,
    p_cap_tasks text[], p_caps integer[],
    p_rate_tasks text[], p_rate_limits integer[], p_rate_periods float8[],
    p_circuits boolean, p_key_tasks text[], p_key_caps integer[],
    p_rkey_tasks text[], p_rkey_limits integer[], p_rkey_periods float8[]
) RETURNS SETOF __schema__.jobs
LANGUAGE plpgsql
-- Plans are cached per session and soon generic (parameters unknown). For a
-- generic plan the planner cannot tell how many waiting jobs a queue has, and
-- may pick a sequential scan and a sort: with these two settings the claim
-- always walks jobs_claim in order and stops after the batch, so its cost does
-- not grow with the backlog. No JIT: the penalty those settings add to a scan
-- of the (tiny) circuits table would otherwise trigger 30 ms of compilation.
-- force_generic_plan (version 2): otherwise the plan cache may keep choosing a
-- custom plan, planning the candidate query anew on every call (~0.3 ms).
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    -- When the claim arrived: time spent waiting for the CPU or planning does
    -- not make more jobs due than were due when the worker asked.
    v_now float8 := extract(epoch FROM statement_timestamp())::float8;
    v_nonclosed text[] := '{}';
    v_blocked text[] := '{}';
    v_trials text[] := '{}';
    v_cap_tasks text[] := '{}';
    v_caps integer[] := '{}';
    v_taken integer[];
    v_excluded text[];
    -- Per-key caps: the capped tasks and their caps; the groups this claim met
    -- (jsonb [task, key] as text) with their active jobs, its own included;
    -- the groups at their cap.
    v_key_tasks text[] := '{}';
    v_key_caps integer[] := '{}';
    v_groups text[] := '{}';
    v_held integer[] := '{}';
    v_full text[] := '{}';
    v_group text;
    -- Per-key rate limits (version 8): the key-rated tasks, their limits and
    -- periods; the windows this claim met (jsonb [task, key] as text) with
    -- their starts, its own included; the spent windows.
    v_rk_tasks text[] := '{}';
    v_rk_limits integer[] := '{}';
    v_rk_periods float8[] := '{}';
    v_windows text[] := '{}';
    v_starts integer[] := '{}';
    v_spent text[] := '{}';
    v_window text;
    v_period float8;
    v_rk integer;
    w integer;
    v_cap integer;
    v_count integer;
    g integer;
    v_ids text[] := '{}';
    v_tasks text[] := '{}';
    v_slow boolean := false;
    v_remaining integer;
    v_asked integer;
    v_seen integer;
    v_skipped boolean;
    v_used bigint;
    v_allowed integer;
    v_task text;
    i integer;
    k integer;
    r record;
    -- Fair queues: the claim's fair queues (name order); per queue of the
    -- claim (v_qs, un-paused, request order) whether fair, its vtime, and its
    -- head job (valid until taken or until an exclusion changes); per
    -- candidate tenant (flat arrays) its queue, name, stored pass, weight,
    -- whether still a candidate, whether this claim moved its pass.
    v_fair_queues text[] := '{}';
    v_qs text[];
    v_q text;
    v_nq integer;
    v_is_fair boolean[];
    v_vt float8[];
    h_valid boolean[];
    h_id text[];
    h_task text[];
    h_key text[];
    h_rkey text[];
    h_prio integer[];
    h_run float8[];
    h_ti integer[];
    f_qi integer[] := '{}';
    f_tenant text[] := '{}';
    f_pass float8[] := '{}';
    f_weight float8[] := '{}';
    f_alive boolean[] := '{}';
    f_changed boolean[] := '{}';
    v_best integer;
    v_ti integer;
    v_eff float8;
    -- The one-fair-queue path: candidates' effective pass, jobs taken, whether
    -- out of claimable jobs; each round's share per tenant and what it fetched.
    f_eff float8[] := '{}';
    f_taken integer[];
    f_done boolean[];
    v_need integer[];
    v_new_ids text[];
    v_new_tasks text[];
    v_bound float8;
    v_fq integer;
    v_new_prio integer[];
    v_new_run float8[];
    fs_id text[] := '{}';
    fs_task text[] := '{}';
    fs_prio integer[] := '{}';
    fs_run float8[] := '{}';
    fs_ord integer[] := '{}';
    fs_tag float8[] := '{}';
    v_tn text[];
    v_ps float8[];
    v_ws float8[];
    v_es float8[];
    h record;
BEGIN
    UPDATE __schema__.jobs SET state = 'waiting'
    WHERE id IN (SELECT d.id FROM __schema__.jobs AS d
                 WHERE d.state = 'delayed' AND d.run_at <= v_now
                 FOR UPDATE SKIP LOCKED);

    RETURN QUERY
    WITH e AS (
        UPDATE __schema__.jobs AS j SET
            state = 'failed',
            failure_reason = 'expired',
            finished_at = v_now,
            errors = (CASE WHEN jsonb_typeof(j.errors) = 'array' THEN j.errors ELSE '[]'::jsonb END)
                || jsonb_build_array(jsonb_build_object(
                    'type', 'Expired', 'message', 'queue TTL expired', 'traceback', '',
                    'attempt', j.attempts, 'reason', 'expired', 'at', v_now))
        WHERE j.id IN (SELECT x.id FROM __schema__.jobs AS x
                       WHERE x.state = 'waiting' AND x.expires_at <= v_now
                       FOR UPDATE SKIP LOCKED)
        RETURNING j.*
    )
    SELECT * FROM e;
    IF FOUND THEN
        -- The expired jobs are finished: their blocked dependents move on.
        PERFORM __schema__.resolve_dependents(ARRAY(
            SELECT j.id FROM __schema__.jobs AS j
            WHERE j.state = 'failed' AND j.finished_at = v_now AND j.has_dependents
              AND j.failure_reason = 'expired'));
    END IF;

    IF p_limit <= 0 OR coalesce(cardinality(p_queues), 0) = 0 THEN
        RETURN;
    END IF;

    -- Circuits: an open one blocks its task; one whose open period passed
    -- admits one trial job, if this claim holds its row (another claimer
    -- holding it is taking the trial: blocked here).
    IF p_circuits THEN
        SELECT coalesce(array_agg(c.task), '{}') INTO v_nonclosed
        FROM __schema__.circuits AS c WHERE c.state <> 'closed';
        IF cardinality(v_nonclosed) > 0 THEN
            SELECT coalesce(array_agg(t.task), '{}') INTO v_trials FROM (
                SELECT c.task FROM __schema__.circuits AS c
                WHERE c.state <> 'closed' AND (c.open_until IS NULL OR c.open_until <= v_now)
                FOR UPDATE SKIP LOCKED) AS t;
            v_blocked := ARRAY(SELECT unnest(v_nonclosed) EXCEPT SELECT unnest(v_trials));
        END IF;
    END IF;

    -- Per-task caps for this claim: the caller's, 1 per trial, what rate limits leave.
    FOR i IN 1 .. coalesce(cardinality(p_cap_tasks), 0) LOOP
        k := array_position(v_cap_tasks, p_cap_tasks[i]);
        IF k IS NULL THEN
            v_cap_tasks := v_cap_tasks || p_cap_tasks[i];
            v_caps := v_caps || p_caps[i];
        ELSE
            v_caps[k] := least(v_caps[k], p_caps[i]);
        END IF;
    END LOOP;
    FOREACH v_task IN ARRAY v_trials LOOP
        k := array_position(v_cap_tasks, v_task);
        IF k IS NULL THEN
            v_cap_tasks := v_cap_tasks || v_task;
            v_caps := v_caps || 1;
        ELSE
            v_caps[k] := least(v_caps[k], 1);
        END IF;
    END LOOP;
    FOR i IN 1 .. coalesce(cardinality(p_rate_tasks), 0) LOOP
        -- Claimers of one rate-limited task take turns (until commit).
        PERFORM pg_advisory_xact_lock(hashtextextended('__channel__/rate/' || p_rate_tasks[i], 0));
        DELETE FROM __schema__.rate_starts AS s
        WHERE s.task = p_rate_tasks[i] AND s.at <= v_now - p_rate_periods[i];
        SELECT coalesce(sum(s.n), 0) INTO v_used FROM __schema__.rate_starts AS s
        WHERE s.task = p_rate_tasks[i] AND s.at > v_now - p_rate_periods[i];
        v_allowed := p_rate_limits[i] - v_used;
        k := array_position(v_cap_tasks, p_rate_tasks[i]);
        IF k IS NULL THEN
            v_cap_tasks := v_cap_tasks || p_rate_tasks[i];
            v_caps := v_caps || v_allowed;
        ELSE
            v_caps[k] := least(v_caps[k], v_allowed);
        END IF;
    END LOOP;

    v_excluded := v_blocked;
    FOR i IN 1 .. cardinality(v_cap_tasks) LOOP
        IF v_caps[i] <= 0 THEN
            v_excluded := v_excluded || v_cap_tasks[i];
        ELSIF v_caps[i] < p_limit THEN
            v_slow := true;  -- a cap that can bind
        END IF;
    END LOOP;
    IF p_key_tasks IS NOT NULL THEN
        FOR v_task, v_cap IN
            SELECT t.task, min(t.cap) FROM unnest(p_key_tasks, p_key_caps) AS t(task, cap)
            WHERE t.task <> ALL (v_excluded)
            GROUP BY t.task ORDER BY t.task
        LOOP
            IF v_cap <= 0 THEN
                v_excluded := v_excluded || v_task;
                CONTINUE;
            END IF;
            PERFORM pg_advisory_xact_lock(hashtextextended('__channel__/keys/' || v_task, 0));
            v_key_tasks := v_key_tasks || v_task;
            v_key_caps := v_key_caps || v_cap;
            v_slow := true;
        END LOOP;
    END IF;
    IF p_rkey_tasks IS NOT NULL THEN
        FOR v_task, v_cap, v_period IN
            SELECT t.task, min(t.lim), max(t.period)
            FROM unnest(p_rkey_tasks, p_rkey_limits, p_rkey_periods) AS t(task, lim, period)
            WHERE t.task <> ALL (v_excluded)
            GROUP BY t.task ORDER BY t.task
        LOOP
            PERFORM pg_advisory_xact_lock(hashtextextended('__channel__/ratekeys/' || v_task, 0));
            DELETE FROM __schema__.rate_key_starts AS s
            WHERE s.task = v_task AND s.at <= v_now - v_period;
            v_rk_tasks := v_rk_tasks || v_task;
            v_rk_limits := v_rk_limits || v_cap;
            v_rk_periods := v_rk_periods || v_period;
            v_slow := true;
        END LOOP;
    END IF;

    SELECT coalesce(array_agg(fq.name ORDER BY fq.name), '{}') INTO v_fair_queues
    FROM __schema__.queues AS fq
    WHERE fq.name = ANY (p_queues) AND fq.fairness IS NOT NULL AND NOT fq.paused;

    IF cardinality(v_fair_queues) > 0 THEN
        -- Claimers of one fair queue take turns (until commit), so each reads
        -- the vtime and passes the previous one wrote.
        FOREACH v_q IN ARRAY v_fair_queues LOOP
            PERFORM pg_advisory_xact_lock(hashtextextended('__channel__/fair/' || v_q, 0));
        END LOOP;
        SELECT array_agg(u.name ORDER BY u.ord) INTO v_qs
        FROM unnest(p_queues) WITH ORDINALITY AS u(name, ord)
        WHERE NOT EXISTS (SELECT 1 FROM __schema__.queues AS pq
                          WHERE pq.name = u.name AND pq.paused);
        v_nq := coalesce(cardinality(v_qs), 0);
        v_is_fair := array_fill(false, ARRAY[v_nq]);
        v_vt := array_fill(NULL::float8, ARRAY[v_nq]);
        FOR i IN 1 .. v_nq LOOP
            CONTINUE WHEN v_qs[i] <> ALL (v_fair_queues);
            -- Candidates: every tenant with a waiting job (NULL first), its
            -- stored pass (NULL: at vtime), effective pass and weight.
            WITH RECURSIVE t(tenant) AS (
                SELECT min(j.tenant COLLATE "C") FROM __schema__.jobs AS j
                WHERE j.state = 'waiting' AND j.fair AND j.queue = v_qs[i]
                UNION ALL
                SELECT (SELECT min(j.tenant COLLATE "C") FROM __schema__.jobs AS j
                        WHERE j.state = 'waiting' AND j.fair AND j.queue = v_qs[i]
                          AND j.tenant COLLATE "C" > t.tenant)
                FROM t WHERE t.tenant IS NOT NULL
            ), c(tenant) AS (
                SELECT NULL::text COLLATE "C" WHERE EXISTS (
                    SELECT 1 FROM __schema__.jobs AS j
                    WHERE j.state = 'waiting' AND j.fair AND j.queue = v_qs[i] AND j.tenant IS NULL)
                UNION ALL
                SELECT t.tenant FROM t WHERE t.tenant IS NOT NULL
            ), q AS (
                SELECT fq.vtime, fq.weights FROM __schema__.queues AS fq WHERE fq.name = v_qs[i]
            ), cp AS (
                SELECT c.tenant,
                       CASE WHEN c.tenant IS NULL
                            THEN (SELECT n.pass FROM __schema__.fair_tenants AS n
                                  WHERE n.queue = v_qs[i] AND n.tenant IS NULL)
                            ELSE p.pass END AS pass
                FROM c LEFT JOIN __schema__.fair_tenants AS p
                    ON p.queue = v_qs[i] AND p.tenant = c.tenant
            )
            SELECT (SELECT q.vtime FROM q),
                   coalesce(array_agg(cp.tenant), '{}'),
                   coalesce(array_agg(cp.pass), '{}'),
                   coalesce(array_agg(greatest(cp.pass, (SELECT q.vtime FROM q))), '{}'),
                   coalesce(array_agg(coalesce(((SELECT q.weights FROM q) ->> cp.tenant)::float8, 1.0)),
                            '{}')
            INTO v_eff, v_tn, v_ps, v_es, v_ws
            FROM cp;
            v_vt[i] := v_eff;
            v_is_fair[i] := true;
            f_qi := f_qi || array_fill(i, ARRAY[cardinality(v_tn)]);
            f_tenant := f_tenant || v_tn;
            f_pass := f_pass || v_ps;
            f_eff := f_eff || v_es;
            f_weight := f_weight || v_ws;
            f_alive := f_alive || array_fill(true, ARRAY[cardinality(v_tn)]);
            f_changed := f_changed || array_fill(false, ARRAY[cardinality(v_tn)]);
        END LOOP;

        v_fq := array_position(v_qs, v_fair_queues[1]);
        IF NOT v_slow AND cardinality(v_fair_queues) = 1 AND v_fq IS NOT NULL THEN
            -- One fair queue, no cap that binds: the whole batch at once. A
            -- tenant's picks carry the tags e, e + 1/w, ... (e its effective
            -- pass, the sums done one at a time as the rule does); the rule takes
            -- the p_limit smallest (tag, name). A tenant that has fewer claimable
            -- jobs than its share drops out after those, and the shares are
            -- drawn again (each round only adds to the others' shares).
            f_taken := array_fill(0, ARRAY[cardinality(f_tenant)]);
            f_done := array_fill(false, ARRAY[cardinality(f_tenant)]);
            WHILE cardinality(f_tenant) > 0 LOOP
                -- Each tenant's share: its tags among the p_limit smallest. The
                -- p_limit-th tag is at most e + p_limit / (sum of the weights of
                -- the tenants starting at or below e), which bounds each
                -- tenant's tags to generate.
                WITH b AS (
                    SELECT min(b.e + p_limit / b.wsum) AS bound FROM (
                        SELECT t.e, sum(t.w) OVER (ORDER BY t.e, t.ord ROWS UNBOUNDED PRECEDING) AS wsum
                        FROM unnest(f_eff, f_weight, f_done) WITH ORDINALITY AS t(e, w, done, ord)
                        WHERE NOT t.done) AS b
                ), tags AS (
                    SELECT t.ord, t.tenant,
                           sum(CASE WHEN k.k = 0 THEN t.e ELSE 1.0 / t.w END)
                               OVER (PARTITION BY t.ord ORDER BY k.k ROWS UNBOUNDED PRECEDING) AS tag
                    FROM unnest(f_tenant, f_eff, f_weight, f_done, f_taken)
                        WITH ORDINALITY AS t(tenant, e, w, done, taken, ord)
                    CROSS JOIN b
                    CROSS JOIN LATERAL generate_series(0, CASE WHEN t.done THEN t.taken - 1
                        ELSE least(p_limit - 1.0, floor((b.bound - t.e) * t.w) + 1.0)::integer
                        END) AS k(k)
                ), n AS (
                    SELECT g.ord, count(*) AS n FROM (
                        SELECT tags.ord FROM tags
                        ORDER BY tags.tag, tags.tenant COLLATE "C" NULLS FIRST
                        LIMIT p_limit
                    ) AS g GROUP BY g.ord
                )
                SELECT array_agg(coalesce(n.n, 0)::integer ORDER BY t.ord) INTO v_need
                FROM unnest(f_eff) WITH ORDINALITY AS t(e, ord)
                LEFT JOIN n ON n.ord = t.ord;
                SELECT fs_id || coalesce(array_agg(x.id), '{}'),
                       fs_task || coalesce(array_agg(x.task), '{}'),
                       fs_prio || coalesce(array_agg(x.priority), '{}'),
                       fs_run || coalesce(array_agg(x.run_at), '{}'),
                       fs_ord || coalesce(array_agg(t.ord::integer), '{}')
                INTO fs_id, fs_task, fs_prio, fs_run, fs_ord
                FROM unnest(f_tenant, v_need, f_taken, f_done)
                    WITH ORDINALITY AS t(tenant, need, taken, done, ord)
                CROSS JOIN LATERAL (
                    SELECT j.id, j.task, j.priority, j.run_at FROM __schema__.jobs AS j
                    WHERE j.state = 'waiting' AND j.fair AND j.queue = v_qs[v_fq]
                      AND j.tenant COLLATE "C" = t.tenant AND j.run_at <= v_now
                      AND j.task <> ALL (v_excluded) AND j.id <> ALL (fs_id)
                    ORDER BY j.priority DESC, j.run_at, j.id
                    LIMIT t.need - t.taken
                    FOR UPDATE SKIP LOCKED
                ) AS x
                WHERE NOT t.done AND t.need > t.taken AND t.tenant IS NOT NULL;
                v_ti := array_position(f_tenant, NULL);
                IF v_ti IS NOT NULL AND NOT f_done[v_ti] AND v_need[v_ti] > f_taken[v_ti] THEN
                    SELECT fs_id || coalesce(array_agg(x.id), '{}'),
                           fs_task || coalesce(array_agg(x.task), '{}'),
                           fs_prio || coalesce(array_agg(x.priority), '{}'),
                           fs_run || coalesce(array_agg(x.run_at), '{}'),
                           fs_ord || array_fill(v_ti, ARRAY[count(*)::integer])
                    INTO fs_id, fs_task, fs_prio, fs_run, fs_ord
                    FROM (SELECT j.id, j.task, j.priority, j.run_at FROM __schema__.jobs AS j
                          WHERE j.state = 'waiting' AND j.fair AND j.queue = v_qs[v_fq] AND j.tenant IS NULL
                            AND j.run_at <= v_now
                            AND j.task <> ALL (v_excluded) AND j.id <> ALL (fs_id)
                          ORDER BY j.priority DESC, j.run_at, j.id
                          LIMIT v_need[v_ti] - f_taken[v_ti]
                          FOR UPDATE SKIP LOCKED) AS x;
                END IF;
                -- Tenants short of their share are out of claimable jobs.
                SELECT array_agg(coalesce(n.n, 0)::integer ORDER BY t.ord),
                       array_agg(t.done OR t.need > coalesce(n.n, 0) ORDER BY t.ord),
                       bool_or(NOT t.done AND t.need > coalesce(n.n, 0))
                INTO f_taken, f_done, v_skipped
                FROM unnest(f_done, v_need) WITH ORDINALITY AS t(done, need, ord)
                LEFT JOIN (SELECT o.ord, count(*) AS n FROM unnest(fs_ord) AS o(ord) GROUP BY o.ord) AS n
                    ON n.ord = t.ord;
                EXIT WHEN NOT v_skipped OR cardinality(fs_id) >= p_limit;
            END LOOP;
            -- The other (plain) queues' candidates, in the usual order.
            v_new_ids := '{}';
            IF v_nq > 1 THEN
                SELECT coalesce(array_agg(c.id), '{}'), coalesce(array_agg(c.task), '{}'),
                       coalesce(array_agg(c.priority), '{}'), coalesce(array_agg(c.run_at), '{}')
                INTO v_new_ids, v_new_tasks, v_new_prio, v_new_run
                FROM (
                    SELECT c.id, c.task, c.priority, c.run_at FROM unnest(v_qs) AS q(name)
                    CROSS JOIN LATERAL (
                        SELECT j.id, j.task, j.priority, j.run_at FROM __schema__.jobs AS j
                        WHERE j.state = 'waiting' AND j.queue = q.name AND j.run_at <= v_now
                          AND j.task <> ALL (v_excluded)
                        ORDER BY j.priority DESC, j.run_at, j.id
                        LIMIT p_limit
                        FOR UPDATE SKIP LOCKED
                    ) AS c
                    WHERE q.name <> v_qs[v_fq]
                    ORDER BY c.priority DESC, c.run_at, c.id
                    LIMIT p_limit
                ) AS c;
            END IF;
            IF cardinality(v_new_ids) = 0 THEN
                -- Every fair pick is taken: each tenant's pass is its last tag
                -- + 1/w, vtime the last pick's tag.
                v_ids := fs_id;
                v_tasks := fs_task;
            END IF;
            IF cardinality(v_new_ids) = 0 AND cardinality(fs_id) > 0 THEN
                SELECT array_agg(coalesce(s.last + 1.0 / t.w, t.pass) ORDER BY t.ord),
                       array_agg(s.last IS NOT NULL ORDER BY t.ord), max(s.last)
                INTO f_pass, f_changed, v_eff
                FROM unnest(f_pass, f_weight) WITH ORDINALITY AS t(pass, w, ord)
                LEFT JOIN (
                    SELECT u.ord, max(u.tag) AS last
                    FROM (SELECT t.ord, sum(CASE WHEN k.k = 1 THEN t.e ELSE 1.0 / t.w END)
                                     OVER (PARTITION BY t.ord ORDER BY k.k ROWS UNBOUNDED PRECEDING) AS tag
                          FROM unnest(f_eff, f_weight, f_taken) WITH ORDINALITY AS t(e, w, taken, ord)
                          CROSS JOIN LATERAL generate_series(1, t.taken) AS k(k)) AS u
                    GROUP BY u.ord
                ) AS s ON s.ord = t.ord;
                v_vt[v_fq] := greatest(v_vt[v_fq], v_eff);
            ELSIF cardinality(v_new_ids) > 0 THEN
                -- The fair stream in the rule's order (each tenant's jobs in the
                -- usual order, on its tags), merged with the plain candidates by
                -- head; only the fair picks taken move passes and vtime.
                SELECT coalesce(array_agg(s.id ORDER BY s.tag, s.tenant COLLATE "C" NULLS FIRST), '{}'),
                       coalesce(array_agg(s.task ORDER BY s.tag, s.tenant COLLATE "C" NULLS FIRST), '{}'),
                       coalesce(array_agg(s.priority ORDER BY s.tag, s.tenant COLLATE "C" NULLS FIRST), '{}'),
                       coalesce(array_agg(s.run_at ORDER BY s.tag, s.tenant COLLATE "C" NULLS FIRST), '{}'),
                       coalesce(array_agg(s.ord ORDER BY s.tag, s.tenant COLLATE "C" NULLS FIRST), '{}'),
                       coalesce(array_agg(s.tag ORDER BY s.tag, s.tenant COLLATE "C" NULLS FIRST), '{}')
                INTO fs_id, fs_task, fs_prio, fs_run, fs_ord, fs_tag
                FROM (
                    SELECT x.id, x.task, x.priority, x.run_at, x.ord, t.tenant,
                           sum(CASE WHEN x.k = 1 THEN t.e ELSE 1.0 / t.w END)
                               OVER (PARTITION BY x.ord ORDER BY x.k ROWS UNBOUNDED PRECEDING) AS tag
                    FROM (SELECT f.*, row_number() OVER (PARTITION BY f.ord
                                                         ORDER BY f.priority DESC, f.run_at,
                                                                  f.id COLLATE "C") AS k
                          FROM unnest(fs_id, fs_task, fs_prio, fs_run, fs_ord)
                              AS f(id, task, priority, run_at, ord)) AS x
                    JOIN unnest(f_tenant, f_eff, f_weight) WITH ORDINALITY AS t(tenant, e, w, ord)
                        ON t.ord = x.ord
                ) AS s;
                i := 1;
                k := 1;
                WHILE cardinality(v_ids) < p_limit LOOP
                    IF i <= cardinality(fs_id) AND (k > cardinality(v_new_ids)
                            OR fs_prio[i] > v_new_prio[k]
                            OR (fs_prio[i] = v_new_prio[k]
                                AND (fs_run[i] < v_new_run[k]
                                     OR (fs_run[i] = v_new_run[k]
                                         AND fs_id[i] COLLATE "C" < v_new_ids[k] COLLATE "C")))) THEN
                        v_ids := v_ids || fs_id[i];
                        v_tasks := v_tasks || fs_task[i];
                        i := i + 1;
                    ELSIF k <= cardinality(v_new_ids) THEN
                        v_ids := v_ids || v_new_ids[k];
                        v_tasks := v_tasks || v_new_tasks[k];
                        k := k + 1;
                    ELSE
                        EXIT;
                    END IF;
                END LOOP;
                -- Each tenant's pass is its last tag taken + 1/w, vtime the
                -- last fair pick's tag.
                IF i > 1 THEN
                    SELECT array_agg(coalesce(s.last + 1.0 / t.w, t.pass) ORDER BY t.ord),
                           array_agg(s.last IS NOT NULL ORDER BY t.ord)
                    INTO f_pass, f_changed
                    FROM unnest(f_pass, f_weight) WITH ORDINALITY AS t(pass, w, ord)
                    LEFT JOIN (SELECT u.ord, max(u.tag) AS last
                               FROM unnest(fs_ord[1:i - 1], fs_tag[1:i - 1]) AS u(ord, tag)
                               GROUP BY u.ord) AS s ON s.ord = t.ord;
                    v_vt[v_fq] := greatest(v_vt[v_fq], fs_tag[i - 1]);
                END IF;
            END IF;
        ELSE
            -- One job at a time: each queue's head (a fair queue's from the tenant
            -- the rule picks), the best head by the usual key is taken unless a
            -- per-key cap or a spent rate window per key refuses it. Task caps
            -- reached, full groups and spent windows exclude their jobs from
            -- every head from then on.
            v_taken := array_fill(0, ARRAY[cardinality(v_cap_tasks)]);
            v_remaining := p_limit;
            h_valid := array_fill(false, ARRAY[v_nq]);
            h_id := array_fill(NULL::text, ARRAY[v_nq]);
            h_task := h_id;
            h_key := h_id;
            h_rkey := h_id;
            h_prio := array_fill(NULL::integer, ARRAY[v_nq]);
            h_run := array_fill(NULL::float8, ARRAY[v_nq]);
            h_ti := h_prio;
            WHILE v_remaining > 0 LOOP
                v_best := NULL;
                FOR i IN 1 .. v_nq LOOP
                    IF NOT h_valid[i] THEN
                        h_id[i] := NULL;
                        h_ti[i] := NULL;
                        LOOP
                            v_ti := NULL;
                            IF v_is_fair[i] THEN
                                SELECT t.ord::integer INTO v_ti
                                FROM unnest(f_qi, f_tenant, f_pass, f_alive)
                                    WITH ORDINALITY AS t(qi, tenant, pass, alive, ord)
                                WHERE t.qi = i AND t.alive
                                ORDER BY greatest(t.pass, v_vt[i]), t.tenant COLLATE "C" NULLS FIRST
                                LIMIT 1;
                                EXIT WHEN v_ti IS NULL;
                            END IF;
                            IF v_ti IS NULL THEN
                                SELECT j.id, j.task, j.concurrency_key, j.rate_limit_key, j.priority, j.run_at INTO h
                                FROM __schema__.jobs AS j
                                WHERE j.state = 'waiting' AND j.queue = v_qs[i] AND j.run_at <= v_now
                                  AND j.task <> ALL (v_excluded) AND j.id <> ALL (v_ids)
                                  AND (j.task <> ALL (v_key_tasks)
                                       OR jsonb_build_array(j.task, j.concurrency_key)::text <> ALL (v_full))
                                  AND (j.task <> ALL (v_rk_tasks)
                                       OR jsonb_build_array(j.task, j.rate_limit_key)::text <> ALL (v_spent))
                                ORDER BY j.priority DESC, j.run_at, j.id
                                LIMIT 1
                                FOR UPDATE SKIP LOCKED;
                            ELSIF f_tenant[v_ti] IS NULL THEN
                                SELECT j.id, j.task, j.concurrency_key, j.rate_limit_key, j.priority, j.run_at INTO h
                                FROM __schema__.jobs AS j
                                WHERE j.state = 'waiting' AND j.fair AND j.queue = v_qs[i] AND j.tenant IS NULL
                                  AND j.run_at <= v_now
                                  AND j.task <> ALL (v_excluded) AND j.id <> ALL (v_ids)
                                  AND (j.task <> ALL (v_key_tasks)
                                       OR jsonb_build_array(j.task, j.concurrency_key)::text <> ALL (v_full))
                                  AND (j.task <> ALL (v_rk_tasks)
                                       OR jsonb_build_array(j.task, j.rate_limit_key)::text <> ALL (v_spent))
                                ORDER BY j.priority DESC, j.run_at, j.id
                                LIMIT 1
                                FOR UPDATE SKIP LOCKED;
                            ELSE
                                SELECT j.id, j.task, j.concurrency_key, j.rate_limit_key, j.priority, j.run_at INTO h
                                FROM __schema__.jobs AS j
                                WHERE j.state = 'waiting' AND j.fair AND j.queue = v_qs[i]
                                  AND j.tenant COLLATE "C" = f_tenant[v_ti]
                                  AND j.run_at <= v_now
                                  AND j.task <> ALL (v_excluded) AND j.id <> ALL (v_ids)
                                  AND (j.task <> ALL (v_key_tasks)
                                       OR jsonb_build_array(j.task, j.concurrency_key)::text <> ALL (v_full))
                                  AND (j.task <> ALL (v_rk_tasks)
                                       OR jsonb_build_array(j.task, j.rate_limit_key)::text <> ALL (v_spent))
                                ORDER BY j.priority DESC, j.run_at, j.id
                                LIMIT 1
                                FOR UPDATE SKIP LOCKED;
                            END IF;
                            IF FOUND THEN
                                h_id[i] := h.id;
                                h_task[i] := h.task;
                                h_key[i] := h.concurrency_key;
                                h_rkey[i] := h.rate_limit_key;
                                h_prio[i] := h.priority;
                                h_run[i] := h.run_at;
                                h_ti[i] := v_ti;
                                EXIT;
                            END IF;
                            EXIT WHEN v_ti IS NULL;
                            f_alive[v_ti] := false;  -- nothing claimable: no credit
                        END LOOP;
                        h_valid[i] := true;
                    END IF;
                    IF h_id[i] IS NOT NULL AND (v_best IS NULL
                            OR h_prio[i] > h_prio[v_best]
                            OR (h_prio[i] = h_prio[v_best]
                                AND (h_run[i] < h_run[v_best]
                                     OR (h_run[i] = h_run[v_best]
                                         AND h_id[i] COLLATE "C" < h_id[v_best] COLLATE "C")))) THEN
                        v_best := i;
                    END IF;
                END LOOP;
                EXIT WHEN v_best IS NULL;

                v_task := h_task[v_best];
                v_rk := array_position(v_rk_tasks, v_task);
                IF v_rk IS NOT NULL THEN
                    v_window := jsonb_build_array(v_task, h_rkey[v_best])::text;
                    w := array_position(v_windows, v_window);
                    IF w IS NULL THEN
                        -- First job of the window: its starts (under the lock).
                        IF h_rkey[v_best] IS NULL THEN
                            SELECT coalesce(sum(s.n), 0) INTO v_count
                            FROM __schema__.rate_key_starts AS s
                            WHERE s.task = v_task AND s.rate_key IS NULL
                              AND s.at > v_now - v_rk_periods[v_rk];
                        ELSE
                            SELECT coalesce(sum(s.n), 0) INTO v_count
                            FROM __schema__.rate_key_starts AS s
                            WHERE s.task = v_task AND s.rate_key = h_rkey[v_best]
                              AND s.at > v_now - v_rk_periods[v_rk];
                        END IF;
                        v_windows := v_windows || v_window;
                        v_starts := v_starts || v_count;
                        w := cardinality(v_windows);
                    END IF;
                    IF v_starts[w] >= v_rk_limits[v_rk] THEN
                        -- Spent: its jobs leave every head, the tenant uncharged.
                        v_spent := v_spent || v_window;
                        h_valid := array_fill(false, ARRAY[v_nq]);
                        CONTINUE;
                    END IF;
                END IF;
                v_cap := v_key_caps[array_position(v_key_tasks, v_task)];
                IF v_cap IS NOT NULL THEN
                    v_group := jsonb_build_array(v_task, h_key[v_best])::text;
                    g := array_position(v_groups, v_group);
                    IF g IS NULL THEN
                        -- First job of the group: count its active jobs (under the lock).
                        IF h_key[v_best] IS NULL THEN
                            SELECT count(*) INTO v_count FROM __schema__.jobs AS a
                            WHERE a.state = 'active' AND a.task = v_task
                              AND a.concurrency_key IS NULL;
                        ELSE
                            SELECT count(*) INTO v_count FROM __schema__.jobs AS a
                            WHERE a.state = 'active' AND a.task = v_task
                              AND a.concurrency_key = h_key[v_best];
                        END IF;
                        v_groups := v_groups || v_group;
                        v_held := v_held || v_count;
                        g := cardinality(v_groups);
                    END IF;
                    IF v_held[g] >= v_cap THEN
                        v_full := v_full || v_group;
                        h_valid := array_fill(false, ARRAY[v_nq]);
                        CONTINUE;
                    END IF;
                    v_held[g] := v_held[g] + 1;
                    IF v_held[g] >= v_cap THEN
                        v_full := v_full || v_group;
                        h_valid := array_fill(false, ARRAY[v_nq]);
                    END IF;
                END IF;
                IF v_rk IS NOT NULL THEN
                    v_starts[w] := v_starts[w] + 1;
                    IF v_starts[w] >= v_rk_limits[v_rk] THEN
                        v_spent := v_spent || v_window;
                        h_valid := array_fill(false, ARRAY[v_nq]);
                    END IF;
                END IF;
                v_ids := v_ids || h_id[v_best];
                v_tasks := v_tasks || v_task;
                v_remaining := v_remaining - 1;
                k := array_position(v_cap_tasks, v_task);
                IF k IS NOT NULL THEN
                    v_taken[k] := v_taken[k] + 1;
                    IF v_taken[k] >= v_caps[k] THEN
                        v_excluded := v_excluded || v_task;
                        h_valid := array_fill(false, ARRAY[v_nq]);
                    END IF;
                END IF;
                v_ti := h_ti[v_best];
                IF v_ti IS NOT NULL THEN
                    v_eff := greatest(f_pass[v_ti], v_vt[v_best]);
                    f_pass[v_ti] := v_eff + 1.0 / f_weight[v_ti];
                    f_changed[v_ti] := true;
                    v_vt[v_best] := v_eff;
                END IF;
                h_valid[v_best] := false;
            END LOOP;

        END IF;

        -- The fair queues' new vtime and the passes this claim moved, updated
        -- in place (stale passes are pruned by maintenance, not here: every
        -- claim deleting and inserting rows would leave a trail of dead ones).
        FOR i IN 1 .. v_nq LOOP
            CONTINUE WHEN NOT v_is_fair[i];
            WITH ch AS (
                SELECT t.tenant, t.pass
                FROM unnest(f_qi, f_tenant, f_pass, f_changed) AS t(qi, tenant, pass, changed)
                WHERE t.qi = i AND t.changed
            ), v AS (
                UPDATE __schema__.queues AS fq SET vtime = v_vt[i]
                WHERE fq.name = v_qs[i] AND EXISTS (SELECT 1 FROM ch)
            ), named AS (
                INSERT INTO __schema__.fair_tenants AS p (queue, tenant, pass)
                SELECT v_qs[i], ch.tenant, ch.pass FROM ch WHERE ch.tenant IS NOT NULL
                ORDER BY ch.tenant
                ON CONFLICT (queue, tenant) DO UPDATE SET pass = excluded.pass
            ), unnamed AS (
                UPDATE __schema__.fair_tenants AS p SET pass = ch.pass FROM ch
                WHERE ch.tenant IS NULL AND p.queue = v_qs[i] AND p.tenant IS NULL
                RETURNING 1
            )
            INSERT INTO __schema__.fair_tenants (queue, tenant, pass)
            SELECT v_qs[i], NULL, ch.pass FROM ch
            WHERE ch.tenant IS NULL AND NOT EXISTS (SELECT 1 FROM unnamed);
        END LOOP;
    ELSIF NOT v_slow THEN
        SELECT coalesce(array_agg(c.id), '{}'), coalesce(array_agg(c.task), '{}')
        INTO v_ids, v_tasks
        FROM (
            SELECT c.id, c.task FROM unnest(p_queues) AS q(name)
            CROSS JOIN LATERAL (
                SELECT j.id, j.task, j.priority, j.run_at FROM __schema__.jobs AS j
                WHERE j.state = 'waiting' AND j.queue = q.name AND j.run_at <= v_now
                  AND j.task <> ALL (v_excluded)
                ORDER BY j.priority DESC, j.run_at, j.id
                LIMIT p_limit
                FOR UPDATE SKIP LOCKED
            ) AS c
            WHERE NOT EXISTS (SELECT 1 FROM __schema__.queues AS pq
                              WHERE pq.name = q.name AND pq.paused)
            ORDER BY c.priority DESC, c.run_at, c.id
            LIMIT p_limit
        ) AS c;
    ELSE
        -- Candidates in claim order; a task that reaches its cap is excluded
        -- and the query re-run, so it cannot starve the tasks behind it.
        v_taken := array_fill(0, ARRAY[cardinality(v_cap_tasks)]);
        v_remaining := p_limit;
        LOOP
            v_asked := v_remaining;
            v_seen := 0;
            v_skipped := false;
            FOR r IN
                SELECT c.id, c.task, c.concurrency_key, c.rate_limit_key
                FROM unnest(p_queues) AS q(name)
                CROSS JOIN LATERAL (
                    SELECT j.id, j.task, j.concurrency_key, j.rate_limit_key, j.priority, j.run_at
                    FROM __schema__.jobs AS j
                    WHERE j.state = 'waiting' AND j.queue = q.name AND j.run_at <= v_now
                      AND j.task <> ALL (v_excluded) AND j.id <> ALL (v_ids)
                      AND (j.task <> ALL (v_key_tasks)
                           OR jsonb_build_array(j.task, j.concurrency_key)::text <> ALL (v_full))
                      AND (j.task <> ALL (v_rk_tasks)
                           OR jsonb_build_array(j.task, j.rate_limit_key)::text <> ALL (v_spent))
                    ORDER BY j.priority DESC, j.run_at, j.id
                    LIMIT v_asked
                    FOR UPDATE SKIP LOCKED
                ) AS c
                WHERE NOT EXISTS (SELECT 1 FROM __schema__.queues AS pq
                                  WHERE pq.name = q.name AND pq.paused)
                ORDER BY c.priority DESC, c.run_at, c.id
                LIMIT v_asked
            LOOP
                v_seen := v_seen + 1;
                k := array_position(v_cap_tasks, r.task);
                IF k IS NOT NULL AND v_taken[k] >= v_caps[k] THEN
                    v_skipped := true;
                    CONTINUE;
                END IF;
                IF v_remaining <= 0 THEN
                    EXIT;
                END IF;
                v_rk := array_position(v_rk_tasks, r.task);
                IF v_rk IS NOT NULL THEN
                    v_window := jsonb_build_array(r.task, r.rate_limit_key)::text;
                    w := array_position(v_windows, v_window);
                    IF w IS NULL THEN
                        -- First job of the window: its starts (under the lock).
                        IF r.rate_limit_key IS NULL THEN
                            SELECT coalesce(sum(s.n), 0) INTO v_count
                            FROM __schema__.rate_key_starts AS s
                            WHERE s.task = r.task AND s.rate_key IS NULL
                              AND s.at > v_now - v_rk_periods[v_rk];
                        ELSE
                            SELECT coalesce(sum(s.n), 0) INTO v_count
                            FROM __schema__.rate_key_starts AS s
                            WHERE s.task = r.task AND s.rate_key = r.rate_limit_key
                              AND s.at > v_now - v_rk_periods[v_rk];
                        END IF;
                        v_windows := v_windows || v_window;
                        v_starts := v_starts || v_count;
                        w := cardinality(v_windows);
                    END IF;
                    IF v_starts[w] >= v_rk_limits[v_rk] THEN
                        IF v_windows[w] <> ALL (v_spent) THEN
                            v_spent := v_spent || v_windows[w];
                        END IF;
                        v_skipped := true;
                        CONTINUE;
                    END IF;
                END IF;
                v_cap := v_key_caps[array_position(v_key_tasks, r.task)];
                IF v_cap IS NOT NULL THEN
                    v_group := jsonb_build_array(r.task, r.concurrency_key)::text;
                    g := array_position(v_groups, v_group);
                    IF g IS NULL THEN
                        -- First job of the group: count its active jobs (under the lock).
                        IF r.concurrency_key IS NULL THEN
                            SELECT count(*) INTO v_count FROM __schema__.jobs AS a
                            WHERE a.state = 'active' AND a.task = r.task
                              AND a.concurrency_key IS NULL;
                        ELSE
                            SELECT count(*) INTO v_count FROM __schema__.jobs AS a
                            WHERE a.state = 'active' AND a.task = r.task
                              AND a.concurrency_key = r.concurrency_key;
                        END IF;
                        v_groups := v_groups || v_group;
                        v_held := v_held || v_count;
                        g := cardinality(v_groups);
                    END IF;
                    IF v_held[g] >= v_cap THEN
                        IF v_group <> ALL (v_full) THEN
                            v_full := v_full || v_group;
                        END IF;
                        v_skipped := true;
                        CONTINUE;
                    END IF;
                    v_held[g] := v_held[g] + 1;
                    IF v_held[g] >= v_cap THEN
                        v_full := v_full || v_group;
                    END IF;
                END IF;
                IF v_rk IS NOT NULL THEN
                    v_starts[w] := v_starts[w] + 1;
                    IF v_starts[w] >= v_rk_limits[v_rk] THEN
                        v_spent := v_spent || v_windows[w];
                    END IF;
                END IF;
                v_ids := v_ids || r.id;
                v_tasks := v_tasks || r.task;
                v_remaining := v_remaining - 1;
                IF k IS NOT NULL THEN
                    v_taken[k] := v_taken[k] + 1;
                    IF v_taken[k] >= v_caps[k] THEN
                        v_excluded := v_excluded || r.task;
                    END IF;
                END IF;
            END LOOP;
            EXIT WHEN v_remaining <= 0 OR NOT v_skipped OR v_seen < v_asked;
        END LOOP;
    END IF;

    IF cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;

    RETURN QUERY
    WITH claimed AS (
        UPDATE __schema__.jobs AS j SET
            state = 'active',
            attempts = j.attempts + 1,
            lease_until = v_now + p_lease,
            lease_token = p_token,
            worker_id = p_worker,
            started_at = v_now
        WHERE j.id = ANY (v_ids)
        RETURNING j.*
    )
    SELECT * FROM claimed;

    IF coalesce(cardinality(p_rate_tasks), 0) > 0 THEN
        INSERT INTO __schema__.rate_starts (task, at, n, period)
        SELECT rt.task, v_now, count(*), rt.period
        FROM unnest(v_tasks) AS t(task)
        JOIN unnest(p_rate_tasks, p_rate_periods) AS rt(task, period) ON rt.task = t.task
        GROUP BY rt.task, rt.period;
    END IF;
    IF cardinality(v_rk_tasks) > 0 THEN
        INSERT INTO __schema__.rate_key_starts (task, rate_key, at, n, period)
        SELECT j.task, j.rate_limit_key, v_now, count(*),
               v_rk_periods[array_position(v_rk_tasks, j.task)]
        FROM __schema__.jobs AS j
        WHERE j.id = ANY (v_ids) AND j.task = ANY (v_rk_tasks)
        GROUP BY j.task, j.rate_limit_key;
    END IF;
    IF cardinality(v_trials) > 0 THEN
        UPDATE __schema__.circuits AS c
        SET state = 'half_open', open_until = v_now + coalesce(c.open_for, 0)
        WHERE c.task = ANY (v_trials) AND c.task = ANY (v_tasks);
    END IF;
END;
$$;


-- enqueue_rate_keyed: enqueue() for a batch where a job has a rate_limit_key
-- (p_rate_limit_keys, one per job; NULL elements for the jobs without one):
-- enqueue()'s rows, and the keys stored on the jobs it inserted, in the same
-- call (so no claim sees a job before its key). A job a key already held (a
-- duplicate, or a debounce that changed the key's job) stores nothing: the
-- key's job keeps its own rate_limit_key.
CREATE FUNCTION __schema__.enqueue_rate_keyed(
    p_ids text[], p_tasks text[], p_queues text[], p_payloads bytea[], p_priorities integer[],
    p_max_attempts integer[], p_timeouts float8[], p_delays float8[], p_run_ats float8[],
    p_ttls float8[], p_keys text[], p_key_ttls float8[], p_tenants text[], p_metadata bytea[],
    p_retry_of text[], p_policies text[], p_workflows text[],
    p_dep_of integer[], p_dep_ids text[], p_dep_pos integer[],
    p_concurrency_keys text[], p_debounces float8[], p_rate_limit_keys text[]
) RETURNS TABLE (out_kind text, out_ord integer, out_id text, out_task text, out_queue text,
                 out_state text, out_value float8)
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY SELECT * FROM __schema__.enqueue(
        p_ids, p_tasks, p_queues, p_payloads, p_priorities, p_max_attempts, p_timeouts,
        p_delays, p_run_ats, p_ttls, p_keys, p_key_ttls, p_tenants, p_metadata, p_retry_of,
        p_policies, p_workflows, p_dep_of, p_dep_ids, p_dep_pos, p_concurrency_keys,
        p_debounces);
    UPDATE __schema__.jobs AS j SET rate_limit_key = k.key
    FROM unnest(p_ids, p_rate_limit_keys) AS k(id, key)
    WHERE j.id = k.id AND k.key IS NOT NULL;
END;
$$;


-- settle: apply each run's outcome to the job active under its lease token
-- (ids are distinct: the caller refuses repeats), then count the runs that
-- carry a circuit policy (p_thresholds not NULL) in their task's circuit, in
-- batch order. A pending cancel wins over retry and release. Returns
-- 'refused' (id), 'cancelled' (id: retry/release that ended cancelled),
-- 'wake' (a queue that got a job back) and 'circuit' (task, new state,
-- failures, open_until) rows; notifies the woken queues. Version 3: a job that
-- ends with has_dependents resolves its blocked dependents (released ones'
-- queues come back as 'wake' rows). Version 5: a release with a delay > 0 is
-- delayed until now + delay (its attempt given back, expires_at = run_at + ttl).
CREATE FUNCTION __schema__.settle(
    p_ids text[], p_tokens text[], p_outcomes text[], p_results bytea[], p_reasons text[],
    p_errors jsonb[], p_delays float8[], p_progress bytea[],
    p_tasks text[], p_thresholds integer[], p_open_fors float8[]
) RETURNS TABLE (out_kind text, out_name text, out_state text, out_failures integer,
                 out_until float8)
LANGUAGE plpgsql AS $$
DECLARE
    v_now float8 := extract(epoch FROM clock_timestamp())::float8;
    v_applied text[];
    v_queues text[];
    v_states text[];
    v_outcomes text[];
    v_finished text[];
    v_failing text[];
    v_state text;
    v_failures integer;
    r record;
BEGIN
    WITH s AS (
        SELECT * FROM unnest(p_ids, p_tokens, p_outcomes, p_results, p_reasons, p_errors,
                             p_delays, p_progress)
            AS s(id, token, outcome, result, reason, error, delay, progress)
    ), u AS (
        UPDATE __schema__.jobs AS j SET
            state = CASE
                WHEN s.outcome IN ('retry', 'release') AND j.cancel_requested THEN 'cancelled'
                WHEN s.outcome = 'complete' THEN 'completed'
                WHEN s.outcome = 'retry' OR (s.outcome = 'release' AND s.delay > 0)
                    THEN 'delayed'
                WHEN s.outcome = 'fail' THEN 'failed'
                WHEN s.outcome = 'cancel' THEN 'cancelled'
                ELSE 'waiting' END,
            result = CASE WHEN s.outcome = 'complete' THEN coalesce(s.result, j.result)
                          ELSE j.result END,
            failure_reason = CASE WHEN s.outcome = 'fail' THEN coalesce(s.reason, 'error') END,
            errors = CASE
                WHEN s.error IS NULL OR s.outcome = 'complete' THEN j.errors
                ELSE (CASE WHEN jsonb_typeof(j.errors) = 'array' THEN j.errors
                           ELSE '[]'::jsonb END)
                     || jsonb_build_array(CASE
                            WHEN coalesce((s.error ->> 'at')::float8, 0) = 0
                                THEN jsonb_set(s.error, '{at}', to_jsonb(v_now))
                            ELSE s.error END) END,
            run_at = CASE WHEN (s.outcome = 'retry' OR (s.outcome = 'release' AND s.delay > 0))
                               AND NOT j.cancel_requested
                          THEN v_now + s.delay ELSE j.run_at END,
            attempts = CASE WHEN s.outcome = 'release' AND NOT j.cancel_requested
                            THEN greatest(j.attempts - 1, 0) ELSE j.attempts END,
            finished_at = CASE WHEN s.outcome IN ('retry', 'release') AND NOT j.cancel_requested
                               THEN NULL ELSE v_now END,
            worker_id = CASE WHEN s.outcome IN ('retry', 'release') AND NOT j.cancel_requested
                             THEN NULL ELSE j.worker_id END,
            progress = coalesce(s.progress, j.progress),
            expires_at = CASE
                WHEN s.outcome = 'retry' AND NOT j.cancel_requested THEN v_now + s.delay + j.ttl
                WHEN s.outcome = 'release' AND NOT j.cancel_requested
                    THEN v_now + greatest(s.delay, 0) + j.ttl
                ELSE j.expires_at END,
            lease_until = NULL,
            lease_token = NULL
        FROM s
        WHERE j.id = s.id AND j.lease_token = s.token AND j.state = 'active'
        RETURNING j.id, j.queue, j.state, s.outcome, j.has_dependents
    )
    SELECT coalesce(array_agg(u.id), '{}'), coalesce(array_agg(u.queue), '{}'),
           coalesce(array_agg(u.state), '{}'), coalesce(array_agg(u.outcome), '{}'),
           array_agg(u.id) FILTER (WHERE u.has_dependents
                                   AND u.state IN ('completed', 'failed', 'cancelled'))
    INTO v_applied, v_queues, v_states, v_outcomes, v_finished
    FROM u;

    IF cardinality(v_applied) < cardinality(p_ids) THEN
        RETURN QUERY
            SELECT 'refused'::text, x.id, NULL::text, NULL::integer, NULL::float8
            FROM (SELECT unnest(p_ids) EXCEPT SELECT unnest(v_applied)) AS x(id);
    END IF;
    IF cardinality(v_applied) = 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
        SELECT 'cancelled'::text, a.id, NULL::text, NULL::integer, NULL::float8
        FROM unnest(v_applied, v_states, v_outcomes) AS a(id, state, outcome)
        WHERE a.outcome IN ('retry', 'release') AND a.state = 'cancelled';
    FOR r IN
        SELECT DISTINCT a.queue FROM unnest(v_queues, v_states) AS a(queue, state)
        WHERE a.state IN ('waiting', 'delayed')
    LOOP
        PERFORM pg_notify('__channel__', r.queue);
        out_kind := 'wake';
        out_name := r.queue;
        out_state := NULL;
        out_failures := NULL;
        out_until := NULL;
        RETURN NEXT;
    END LOOP;
    IF v_finished IS NOT NULL THEN
        RETURN QUERY
            SELECT 'wake'::text, w.queue, NULL::text, NULL::integer, NULL::float8
            FROM __schema__.resolve_dependents(v_finished) AS w(queue);
    END IF;

    IF p_thresholds IS NULL THEN
        RETURN;
    END IF;
    -- Circuits. Successes on closed circuits without failures change nothing:
    -- only touch (and lock, in task order) the rows when a failure is counted
    -- or a circuit of the batch is not clean.
    SELECT coalesce(array_agg(DISTINCT t.task), '{}') INTO v_failing
    FROM unnest(p_ids, p_tasks, p_outcomes, p_thresholds) AS t(id, task, outcome, threshold)
    JOIN unnest(v_applied) AS a(id) ON a.id = t.id
    WHERE t.threshold IS NOT NULL AND t.outcome IN ('retry', 'fail');
    IF cardinality(v_failing) = 0 AND NOT EXISTS (
        SELECT 1 FROM __schema__.circuits AS c
        WHERE c.task = ANY (p_tasks) AND (c.state <> 'closed' OR c.failures > 0)
    ) THEN
        RETURN;
    END IF;
    INSERT INTO __schema__.circuits (task)
    SELECT f.task FROM unnest(v_failing) AS f(task) ORDER BY f.task
    ON CONFLICT (task) DO NOTHING;
    PERFORM 1 FROM __schema__.circuits AS c
    WHERE c.task = ANY (p_tasks) ORDER BY c.task FOR UPDATE;

    FOR r IN
        SELECT t.task, t.outcome, t.threshold, t.open_for
        FROM unnest(p_ids, p_tasks, p_outcomes, p_thresholds, p_open_fors)
             WITH ORDINALITY AS t(id, task, outcome, threshold, open_for, ord)
        JOIN unnest(v_applied) AS a(id) ON a.id = t.id
        WHERE t.threshold IS NOT NULL
        ORDER BY t.ord
    LOOP
        SELECT c.state, c.failures INTO v_state, v_failures
        FROM __schema__.circuits AS c WHERE c.task = r.task;
        IF NOT FOUND THEN
            CONTINUE;  -- a success on a circuit that has no row: closed, no failures
        END IF;
        IF r.outcome = 'complete' THEN
            IF v_state <> 'closed' THEN
                UPDATE __schema__.circuits AS c
                SET state = 'closed', failures = 0, open_until = NULL WHERE c.task = r.task;
                out_kind := 'circuit';
                out_name := r.task;
                out_state := 'closed';
                out_failures := 0;
                out_until := NULL;
                RETURN NEXT;
            ELSIF v_failures > 0 THEN
                UPDATE __schema__.circuits AS c SET failures = 0 WHERE c.task = r.task;
            END IF;
        ELSIF r.outcome IN ('retry', 'fail') THEN
            v_failures := v_failures + 1;
            IF v_state = 'half_open'
               OR (v_state = 'closed' AND r.threshold > 0 AND v_failures >= r.threshold) THEN
                UPDATE __schema__.circuits AS c
                SET state = 'open', failures = v_failures, open_for = r.open_for,
                    open_until = v_now + r.open_for
                WHERE c.task = r.task;
                out_kind := 'circuit';
                out_name := r.task;
                out_state := 'open';
                out_failures := v_failures;
                out_until := v_now + r.open_for;
                RETURN NEXT;
            ELSE
                UPDATE __schema__.circuits AS c
                SET failures = v_failures, open_for = r.open_for
                WHERE c.task = r.task;
            END IF;
        END IF;
    END LOOP;
END;
$$;


-- resolve_dependents: p_finished just became terminal in this transaction
-- (the callers pass only jobs flagged has_dependents). First the blocked jobs
-- with policy cancel that depend on a failed or cancelled one are cancelled
-- (dependency_failed), transitively, in one statement (a recursive query, so
-- a chain of any length costs no recursion depth); then each blocked job
-- waiting on a finished or newly cancelled job is released to waiting (delayed
-- while its run_at is ahead; its TTL counts from now) once every dependency is
-- satisfied: completed or gone (only finished jobs are deleted), or finished
-- at all under policy 'run'. Candidates are locked in id order before their
-- dependencies are read, in a later statement: of concurrent completions of a
-- join's last dependencies, the last to lock it sees the others committed, so
-- it is released exactly once. Returns (and notifies) the released jobs' queues.
-- Version 10: p_now is the release time (NULL: the clock). complete_claim
-- (queries.sql) passes its statement's start, the time its claim counts as
-- now, so that a dependent it releases is due to that claim.
CREATE FUNCTION __schema__.resolve_dependents(p_finished text[], p_now float8)
RETURNS SETOF text
LANGUAGE plpgsql
-- Every statement here follows keys from a few rows: by index, whatever the
-- table statistics say (a hash join would scan job_dependencies once per level
-- of a chain). No JIT: those settings' cost penalties would trigger it.
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
-- Version 10: one generic plan per statement. Planning them anew on every call
-- (the plan cache's choice for a few of them) cost more than running them.
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now float8 := coalesce(p_now, extract(epoch FROM clock_timestamp())::float8);
    v_done text[];
    v_candidates text[];
BEGIN
    IF p_finished IS NULL OR cardinality(p_finished) = 0 THEN
        RETURN;
    END IF;
    WITH RECURSIVE doomed(id) AS (
        SELECT f.id FROM __schema__.jobs AS f
        WHERE f.id = ANY (p_finished) AND f.state IN ('failed', 'cancelled')
        UNION
        -- From each job of the level before, its dependents by key: OFFSET 0
        -- keeps both lookups inside the loop (and the filter outside them),
        -- whatever the row estimates of a fast-changing table say.
        SELECT n.id FROM doomed
        CROSS JOIN LATERAL (SELECT e.job_id AS id FROM __schema__.job_dependencies AS e
                            WHERE e.depends_on = doomed.id OFFSET 0) AS n
        CROSS JOIN LATERAL (SELECT d.state, d.on_dependency_failure FROM __schema__.jobs AS d
                            WHERE d.id = n.id OFFSET 0) AS d
        WHERE d.state = 'blocked' AND d.on_dependency_failure IS NULL
    ), cancelled AS (
        UPDATE __schema__.jobs AS j
        SET state = 'cancelled', failure_reason = 'dependency_failed', finished_at = v_now
        WHERE j.id IN (SELECT x.id FROM __schema__.jobs AS x
                       WHERE x.id = ANY (ARRAY(SELECT doomed.id FROM doomed))
                         AND x.state = 'blocked'
                       ORDER BY x.id
                       FOR NO KEY UPDATE)
        RETURNING j.id
    )
    SELECT p_finished || coalesce(array_agg(cancelled.id), '{}') INTO v_done FROM cancelled;

    WITH edges AS (
        DELETE FROM __schema__.job_dependencies AS e WHERE e.depends_on = ANY (v_done)
        RETURNING e.job_id
    )
    SELECT array_agg(DISTINCT edges.job_id) INTO v_candidates FROM edges;
    v_candidates := ARRAY(
        SELECT j.id FROM __schema__.jobs AS j
        WHERE j.id = ANY (v_candidates) AND j.state = 'blocked'
        ORDER BY j.id
        FOR NO KEY UPDATE);
    IF cardinality(v_candidates) = 0 THEN
        RETURN;
    END IF;

    RETURN QUERY
    WITH released AS (
        UPDATE __schema__.jobs AS j SET
            state = CASE WHEN j.run_at > v_now THEN 'delayed' ELSE 'waiting' END,
            run_at = greatest(j.run_at, v_now),
            expires_at = greatest(j.run_at, v_now) + j.ttl
        WHERE j.id = ANY (v_candidates) AND j.state = 'blocked'
          AND NOT EXISTS (
              SELECT 1 FROM unnest(j.depends_on) AS u(id)
              JOIN __schema__.jobs AS p ON p.id = u.id
              WHERE p.state <> 'completed'
                AND (j.on_dependency_failure IS NULL
                     OR p.state NOT IN ('failed', 'cancelled')))
        RETURNING j.queue
    ), woken AS (
        SELECT DISTINCT released.queue FROM released
    )
    SELECT woken.queue FROM woken, pg_notify('__channel__', woken.queue);
END;
$$;


-- resolve_dependents(p_finished): released at the clock's time (settle(),
-- claim()'s TTL expiry, complete). Version 10: a wrapper of the two-argument
-- function.
CREATE FUNCTION __schema__.resolve_dependents(p_finished text[]) RETURNS SETOF text
LANGUAGE sql STRICT
AS $$ SELECT __schema__.resolve_dependents(p_finished, NULL) $$;
