-- Migration 0006: fair queues (QueueInfo.fairness and weights; the claim's
-- weighted round-robin across tenants, see backends/base.py).
--
-- Applied by migrate.py inside one BEGIN IMMEDIATE transaction (see 0001).
-- ALTER TABLE ... ADD COLUMN only appends; existing queues stay plain.

-- fairness: NULL (plain) or 'tenant'; weights: a JSON object tenant -> weight
-- (NULL: every tenant weighs 1); vtime: the queue's virtual time.
ALTER TABLE queues ADD COLUMN fairness TEXT;
ALTER TABLE queues ADD COLUMN weights TEXT;
ALTER TABLE queues ADD COLUMN vtime REAL NOT NULL DEFAULT 0;

-- pass[queue, tenant] of the rule (tenant NULL: the jobs without a tenant).
-- One row per pair, kept so by the single writer (a NULL tenant cannot be a
-- primary key column); a claim drops the rows at or below its queue's vtime.
CREATE TABLE fair_passes (
    queue  TEXT NOT NULL,
    tenant TEXT,
    pass   REAL NOT NULL
);
CREATE INDEX fair_passes_key ON fair_passes (queue, tenant);

-- A fair claim walks the distinct tenants of a queue's waiting jobs (a loose
-- index scan) and takes each tenant's first job in claim order from here.
CREATE INDEX jobs_fair ON jobs (queue, tenant, priority DESC, run_at, id)
    WHERE state = 'waiting';

PRAGMA user_version = 6;
