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

-- The tenants of a fair queue that may have waiting jobs, with their pass of
-- the rule (0 for a new one: clamped to vtime). tenant_key is '' for the jobs
-- without a tenant and '=' || tenant otherwise, so it can be a key and sorts
-- as the rule orders tenants (no tenant first, then names). The triggers
-- below add a row when a job of a fair queue becomes waiting; the claim
-- deletes a row once its tenant has nothing waiting and its pass <= vtime.
CREATE TABLE fair_tenants (
    queue      TEXT NOT NULL,
    tenant_key TEXT NOT NULL,
    pass       REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, tenant_key)
) WITHOUT ROWID;

-- A fair claim reads the tenants ahead of vtime in pass order.
CREATE INDEX fair_tenants_pass ON fair_tenants (queue, pass, tenant_key);

CREATE TRIGGER fair_tenant_inserted AFTER INSERT ON jobs
WHEN NEW.state = 'waiting'
  AND EXISTS (SELECT 1 FROM queues WHERE name = NEW.queue AND fairness IS NOT NULL)
BEGIN
    INSERT OR IGNORE INTO fair_tenants (queue, tenant_key)
    VALUES (NEW.queue, ifnull('=' || NEW.tenant, ''));
END;

CREATE TRIGGER fair_tenant_waiting AFTER UPDATE OF state ON jobs
WHEN NEW.state = 'waiting' AND OLD.state <> 'waiting'
  AND EXISTS (SELECT 1 FROM queues WHERE name = NEW.queue AND fairness IS NOT NULL)
BEGIN
    INSERT OR IGNORE INTO fair_tenants (queue, tenant_key)
    VALUES (NEW.queue, ifnull('=' || NEW.tenant, ''));
END;

-- A fair claim takes each tenant's first job in claim order from here.
CREATE INDEX jobs_fair ON jobs (queue, tenant, priority DESC, run_at, id)
    WHERE state = 'waiting';

PRAGMA user_version = 6;
