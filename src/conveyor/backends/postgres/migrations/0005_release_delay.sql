-- conveyor PostgreSQL schema, version 5: a release with a delay. settle() puts
-- a job released with p_delays > 0 in 'delayed' until now + delay, its attempt
-- given back and expires_at = run_at + ttl (a worker that does not know the
-- task gives its jobs back for later: unknown_task_grace). A release with delay
-- 0 is 'waiting' in its old place as before; completions (complete()) are not
-- touched. Only the function changes: no row is rewritten.
CREATE OR REPLACE FUNCTION __schema__.settle(
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
