-- 0002: schedules (cron and interval), stored so that any number of
-- schedulers share them and operator changes persist.

-- Schedules (see schedules.py): the definition the app's code declares (spec_*,
-- task, payload, options, fingerprint) and the state operators and schedulers
-- change. cron/every hold the expression in force (the spec's, or a set-cron
-- override); next_fire_at is NULL once the schedule is finished.
CREATE TABLE schedules (
    name         TEXT    NOT NULL PRIMARY KEY,
    task         TEXT    NOT NULL,
    payload      BLOB    NOT NULL,
    spec_cron    TEXT,
    spec_every   REAL,
    timezone     TEXT    NOT NULL,
    start_at     REAL,
    end_at       REAL,
    fire_limit   INTEGER,
    misfire      TEXT    NOT NULL,
    options      BLOB    NOT NULL,
    fingerprint  TEXT    NOT NULL,
    cron         TEXT,
    every        REAL,
    paused       INTEGER NOT NULL DEFAULT 0,
    next_fire_at REAL,
    fires        INTEGER NOT NULL DEFAULT 0,
    last_fire_at REAL,
    updated_at   REAL    NOT NULL
) WITHOUT ROWID;

PRAGMA user_version = 2;
