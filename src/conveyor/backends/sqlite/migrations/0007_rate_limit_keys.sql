-- Migration 0007: rate limits per key (NewJob.rate_limit_key,
-- ClaimRequest.key_rate_limits).
--
-- Applied by migrate.py inside one BEGIN IMMEDIATE transaction (see 0001).
-- ALTER TABLE ... ADD COLUMN only appends; existing rows get NULL (the task's
-- one shared window).

-- The window ClaimRequest.key_rate_limits counts the job's start in.
ALTER TABLE jobs ADD COLUMN rate_limit_key TEXT;

-- Sliding windows per (task, rate_limit_key): a log of starts, like
-- rate_starts (n jobs at one time), kept apart from the per-task windows so
-- those queries stay as they are. rate_key NULL is the keyless window.
CREATE TABLE rate_key_starts (
    task     TEXT    NOT NULL,
    rate_key TEXT,
    at       REAL    NOT NULL,
    n        INTEGER NOT NULL,
    period   REAL    NOT NULL
);
CREATE INDEX rate_key_starts_window ON rate_key_starts (task, rate_key, at);

PRAGMA user_version = 7;
