-- conveyor PostgreSQL schema, version 10: a settle that claims, and a cheaper
-- release of dependents.
--
-- resolve_dependents(p_finished, p_now): the body of version 3's
-- resolve_dependents with the release time as a parameter (NULL: the clock),
-- so that complete_claim (queries.sql: settle_and_claim's completions and the
-- claim after them, one statement) releases at its statement's start, the
-- "now" of the claim it runs next, which then claims what it released. Its
-- statements take one generic plan each (plan_cache_mode): re-planned on every
-- call they cost three times as much. The one-argument function every other
-- caller uses stays, as a wrapper. No row is rewritten.
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
CREATE OR REPLACE FUNCTION __schema__.resolve_dependents(p_finished text[]) RETURNS SETOF text
LANGUAGE sql STRICT
AS $$ SELECT __schema__.resolve_dependents(p_finished, NULL) $$;
