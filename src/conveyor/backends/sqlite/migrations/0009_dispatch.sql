-- Migration 0009: the dispatch record of RabbitMQ dispatch
-- (docs/explanation/rabbitmq.md), as PostgreSQL's migration 4.
--
-- Applied by migrate.py inside one BEGIN IMMEDIATE transaction (see 0001).
-- dispatched_at is NULL until a relay published the job's message; a job made
-- due again later (a retry) has run_at past it. Nullable without a default: no
-- row is rewritten, and enqueue writes nothing more. The relay's partial index
-- is created by the first relay (dispatch.sql), so a store that never
-- dispatches pays nothing per enqueue. Numbered after 0008 rather than in one
-- of the reserved places 0006/0007: a database already at version 6-8 (made
-- while those were placeholders) gets the column too.
ALTER TABLE jobs ADD COLUMN dispatched_at REAL;

PRAGMA user_version = 9;
