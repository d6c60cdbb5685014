-- conveyor PostgreSQL schema, version 2: the claim keeps one generic plan.
--
-- PL/pgSQL caches each statement's plan per session, but the plan cache keeps
-- re-planning a statement (a "custom" plan per call) while it estimates that
-- cheaper than the generic plan. The claim's candidate query then cost ~0.3 ms
-- of planning on every call, more than the claim itself on a small queue.
-- enable_seqscan/enable_bitmapscan = off (version 1) already make the generic
-- plan walk jobs_claim in order and stop after the batch, whatever the backlog.
ALTER FUNCTION __schema__.claim(
    text[], integer, float8, text, text, text[], integer[], text[], integer[], float8[], boolean
) SET plan_cache_mode = force_generic_plan;
