-- Migration 0003: job statistics, reported by workers for /metrics and dashboards.
--
-- Applied by migrate.py inside one BEGIN IMMEDIATE transaction (see 0001).

-- Job statistics reported by workers (see stats.sql): cumulative totals per
-- (task, queue, status) for /metrics, and per-minute series rows pruned by age.
CREATE TABLE job_stat_totals (
    task         TEXT    NOT NULL,
    queue        TEXT    NOT NULL,
    status       TEXT    NOT NULL,
    count        INTEGER NOT NULL DEFAULT 0,
    duration_sum REAL    NOT NULL DEFAULT 0,
    buckets      TEXT    NOT NULL,
    PRIMARY KEY (task, queue, status)
) WITHOUT ROWID;

CREATE TABLE job_stat_series (
    minute       REAL    NOT NULL,
    task         TEXT    NOT NULL,
    queue        TEXT    NOT NULL,
    status       TEXT    NOT NULL,
    count        INTEGER NOT NULL DEFAULT 0,
    duration_sum REAL    NOT NULL DEFAULT 0,
    buckets      TEXT    NOT NULL,
    PRIMARY KEY (minute, task, queue, status)
) WITHOUT ROWID;

PRAGMA user_version = 3;
