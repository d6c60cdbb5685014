-- conveyor PostgreSQL schema, version 7: rate limits per key.
--
-- rate_limit_key: the window a job's start counts in under its task's per-key
-- rate limit (ClaimRequest.key_rate_limits). Nullable without a default: no
-- row is rewritten. Starts go to rate_key_starts. enqueue() is left as it is:
-- enqueue_rate_keyed() wraps it for the batches that carry keys. claim() takes
-- the per-key rate limits (p_rkey_tasks, p_rkey_limits, p_rkey_periods): it is
-- dropped and created anew with the new parameters.
ALTER TABLE __schema__.jobs ADD COLUMN rate_limit_key text;

-- Sliding windows per (task, rate_limit_key) (version 7): a log of starts like
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


DROP FUNCTION __schema__.claim(
    text[], integer, float8, text, text, text[], integer[], text[], integer[], float8[], boolean,
    text[], integer[]
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
-- Version 7: per-key rate limits (p_rkey_tasks/p_rkey_limits/p_rkey_periods):
-- at most that many starts of the task per rate_limit_key (NULL is one
-- window) in any sliding window of the period, logged in rate_key_starts.
-- Claimers that carry them for a task take turns on it (an advisory lock per
-- task, taken in task order after the key caps' locks, held until commit); a
-- spent window is left out of the candidate query and the jobs behind it are
-- claimed. Claims without p_rkey_tasks never look.
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
    -- Per-key rate limits (version 7): the key-rated tasks, their limits and
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
