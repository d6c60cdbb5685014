-- Migration 0004: dependencies between jobs (NewJob.depends_on).
--
-- Applied by migrate.py inside one BEGIN IMMEDIATE transaction (see 0001).
-- ALTER TABLE ... ADD COLUMN only appends; existing rows get the defaults (no
-- dependencies, policy cancel, no workflow, no dependents).

-- The dependencies as given (a JSON array of ids, NULL: none), in order.
ALTER TABLE jobs ADD COLUMN depends_on TEXT;

-- What a job does when a dependency fails or is cancelled: 'cancel' or 'run'.
ALTER TABLE jobs ADD COLUMN on_dependency_failure TEXT NOT NULL DEFAULT 'cancel';

ALTER TABLE jobs ADD COLUMN workflow_id TEXT;

-- 1 once a blocked job was enqueued that waits for this one. The operations
-- that finish a job look for dependents only on rows with the flag, so a job
-- nobody waits for costs nothing more to settle.
ALTER TABLE jobs ADD COLUMN has_dependents INTEGER NOT NULL DEFAULT 0;

-- Blocked jobs, for the counts per queue and state (index-only).
CREATE INDEX jobs_blocked ON jobs (queue) WHERE state = 'blocked';

-- The dependencies a blocked job still waits for, one row per (dependency,
-- dependent). Written at enqueue for the dependencies not finished yet; a
-- dependency's rows are deleted when it finishes (its dependents are resolved
-- then), so a blocked job with no row left has all its dependencies finished.
CREATE TABLE job_dependencies (
    dependency_id TEXT NOT NULL,
    job_id        TEXT NOT NULL,
    PRIMARY KEY (dependency_id, job_id)
) WITHOUT ROWID;
-- Whether a blocked job still waits for anything.
CREATE INDEX job_dependencies_job ON job_dependencies (job_id);

PRAGMA user_version = 4;
