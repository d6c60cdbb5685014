-- conveyor PostgreSQL schema, version 6: flow control.
--
-- concurrency_key: the group a job's task's per-key cap counts it in
-- (ClaimRequest.key_limits). Nullable without a default: no row is rewritten.
-- jobs_key_active counts a group's active jobs for a claim that carries caps;
-- jobs without a key are not in it, so a job that never has a key costs no
-- index entry when claimed (a capped task's keyless group is counted through
-- jobs_lease, the active jobs). claim() takes the caps (p_key_tasks,
-- p_key_caps) and enqueue() the keys and debounces (p_concurrency_keys,
-- p_debounces): both are dropped and created anew with the new parameters.
ALTER TABLE __schema__.jobs ADD COLUMN concurrency_key text;

-- Per-key caps: a group's active jobs (only jobs that have a key).
CREATE INDEX jobs_key_active ON __schema__.jobs (task, concurrency_key)
    WHERE state = 'active' AND concurrency_key IS NOT NULL;

DROP FUNCTION __schema__.enqueue(
    text[], text[], text[], bytea[], integer[], integer[], float8[], float8[], float8[],
    float8[], text[], float8[], text[], bytea[], text[], text[], text[], integer[], text[],
    integer[]
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
                                 concurrency_key)
    SELECT b.id, b.task, b.queue,
           CASE WHEN v_states[b.ord] IS NOT NULL THEN v_states[b.ord]
                WHEN b.run_at > v_now THEN 'delayed' ELSE 'waiting' END,
           b.priority, b.max_attempts, b.timeout, b.ttl, b.run_at, v_now,
           CASE WHEN v_states[b.ord] = 'cancelled' THEN v_now END, b.run_at + b.ttl,
           CASE WHEN v_states[b.ord] = 'cancelled' THEN 'dependency_failed' END,
           b.key, b.tenant, b.retry_of, b.payload, b.metadata,
           p_dep_ids[v_first[b.ord]:v_last[b.ord]], b.policy, b.workflow,
           coalesce(v_parent[b.ord], false), b.concurrency_key
    FROM (
        SELECT x.id, x.task, x.queue, x.priority, x.max_attempts, x.timeout,
               least(x.ttl, q.ttl) AS ttl,
               coalesce(v_now + x.debounce, x.run_at, v_now + coalesce(x.delay, 0.0)) AS run_at,
               x.key, x.tenant, x.retry_of, x.payload, x.metadata, x.policy, x.workflow,
               x.concurrency_key, x.ord::integer AS ord
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


DROP FUNCTION __schema__.claim(
    text[], integer, float8, text, text, text[], integer[], text[], integer[], float8[], boolean
);

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
CREATE FUNCTION __schema__.claim(
    p_queues text[], p_limit integer, p_lease float8, p_worker text, p_token text,
    p_cap_tasks text[], p_caps integer[],
    p_rate_tasks text[], p_rate_limits integer[], p_rate_periods float8[],
    p_circuits boolean, p_key_tasks text[], p_key_caps integer[]
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

    IF NOT v_slow THEN
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
                SELECT c.id, c.task, c.concurrency_key FROM unnest(p_queues) AS q(name)
                CROSS JOIN LATERAL (
                    SELECT j.id, j.task, j.concurrency_key, j.priority, j.run_at
                    FROM __schema__.jobs AS j
                    WHERE j.state = 'waiting' AND j.queue = q.name AND j.run_at <= v_now
                      AND j.task <> ALL (v_excluded) AND j.id <> ALL (v_ids)
                      AND (j.task <> ALL (v_key_tasks)
                           OR jsonb_build_array(j.task, j.concurrency_key)::text <> ALL (v_full))
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
    IF cardinality(v_trials) > 0 THEN
        UPDATE __schema__.circuits AS c
        SET state = 'half_open', open_until = v_now + coalesce(c.open_for, 0)
        WHERE c.task = ANY (v_trials) AND c.task = ANY (v_tasks);
    END IF;
END;
$$;
