-- conveyor PostgreSQL schema, version 4: the dispatch record (RabbitMQ dispatch,
-- docs/explanation/rabbitmq.md). dispatched_at is NULL until a relay published
-- the job's message; a job made due again later (a retry) has run_at past it.
-- Nullable without a default: no row is rewritten, and enqueue writes nothing
-- more. The relay's partial index is created by the first relay (dispatch.sql),
-- so a store that never dispatches pays nothing per enqueue.
ALTER TABLE __schema__.jobs ADD COLUMN dispatched_at float8;
