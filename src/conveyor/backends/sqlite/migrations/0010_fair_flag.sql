-- Migration 0010: fair queues cost nothing for plain queues.
--
-- Applied by migrate.py inside one BEGIN IMMEDIATE transaction (see 0001).
-- Until 0009 every waiting job was in jobs_fair and every insert or return to
-- waiting evaluated a trigger that looked the queue up. Now a job carries
-- fair = 1 when its queue is fair (NULL otherwise): set at enqueue from the
-- queue's fairness, copied by a retry, and rewritten for all of a queue's jobs
-- (every state) by configure_queue when the queue turns fair or plain, in the
-- same write transaction. jobs_fair holds only fair jobs, and the triggers
-- test the row's own flag. ADD COLUMN without a default rewrites no row.
ALTER TABLE jobs ADD COLUMN fair INTEGER;

-- The jobs of the queues fair before this migration.
UPDATE jobs SET fair = 1
WHERE queue IN (SELECT name FROM queues WHERE fairness IS NOT NULL);

DROP INDEX jobs_fair;
CREATE INDEX jobs_fair ON jobs (queue, tenant, priority DESC, run_at, id)
    WHERE state = 'waiting' AND fair = 1;

DROP TRIGGER fair_tenant_inserted;
DROP TRIGGER fair_tenant_waiting;

CREATE TRIGGER fair_tenant_inserted AFTER INSERT ON jobs
WHEN NEW.fair = 1 AND NEW.state = 'waiting'
BEGIN
    INSERT OR IGNORE INTO fair_tenants (queue, tenant_key)
    VALUES (NEW.queue, ifnull('=' || NEW.tenant, ''));
END;

CREATE TRIGGER fair_tenant_waiting AFTER UPDATE OF state ON jobs
WHEN NEW.fair = 1 AND NEW.state = 'waiting' AND OLD.state <> 'waiting'
BEGIN
    INSERT OR IGNORE INTO fair_tenants (queue, tenant_key)
    VALUES (NEW.queue, ifnull('=' || NEW.tenant, ''));
END;

PRAGMA user_version = 10;
