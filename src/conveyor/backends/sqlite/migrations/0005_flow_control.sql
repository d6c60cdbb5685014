-- Migration 0005: flow control (per-key concurrency, NewJob.concurrency_key).
--
-- Applied by migrate.py inside one BEGIN IMMEDIATE transaction (see 0001).
-- ALTER TABLE ... ADD COLUMN only appends; existing rows get NULL (the task's
-- one shared group). Debounce needs no schema: it rewrites the key's job row.

-- The group ClaimRequest.key_limits counts the task's active jobs in.
ALTER TABLE jobs ADD COLUMN concurrency_key TEXT;

-- A capped claim counts the active jobs of each (task, key) group here. Only
-- jobs that have a key are in it, so a job without one pays nothing more to be
-- claimed or settled; the keyless group is counted through jobs_lease.
CREATE INDEX jobs_key_active ON jobs (task, concurrency_key)
    WHERE state = 'active' AND concurrency_key IS NOT NULL;

PRAGMA user_version = 5;
