-- Schedules: the code's definitions plus operator and scheduler state (see
-- schedules.py). Table: schedules. Every statement binds values by name.

-- name: fingerprint_of
SELECT fingerprint FROM schedules WHERE name = :name;

-- name: insert_schedule
INSERT INTO schedules (
    name, task, payload, spec_cron, spec_every, timezone, start_at, end_at, fire_limit,
    misfire, options, fingerprint, cron, every, paused, next_fire_at, fires, last_fire_at,
    updated_at
) VALUES (
    :name, :task, :payload, :spec_cron, :spec_every, :timezone, :start_at, :end_at,
    :fire_limit, :misfire, :options, :fingerprint, :spec_cron, :spec_every, 0,
    :next_fire_at, 0, NULL, :now
);

-- name: replace_definition
-- A changed definition: the override goes, paused/fires/last_fire_at stay.
UPDATE schedules SET
    task = :task, payload = :payload, spec_cron = :spec_cron, spec_every = :spec_every,
    timezone = :timezone, start_at = :start_at, end_at = :end_at, fire_limit = :fire_limit,
    misfire = :misfire, options = :options, fingerprint = :fingerprint,
    cron = :spec_cron, every = :spec_every, next_fire_at = :next_fire_at, updated_at = :now
WHERE name = :name;

-- name: get_schedule
SELECT name, task, payload, spec_cron, spec_every, timezone, start_at, end_at, fire_limit,
       misfire, options, fingerprint, cron, every, paused, next_fire_at, fires,
       last_fire_at, updated_at
FROM schedules WHERE name = :name;

-- name: list_schedules
SELECT name, task, payload, spec_cron, spec_every, timezone, start_at, end_at, fire_limit,
       misfire, options, fingerprint, cron, every, paused, next_fire_at, fires,
       last_fire_at, updated_at
FROM schedules ORDER BY name;

-- name: set_paused
UPDATE schedules SET paused = :paused, updated_at = :now WHERE name = :name;

-- name: set_expression
UPDATE schedules SET cron = :cron, every = :every, updated_at = :now WHERE name = :name;

-- name: set_next_fire
UPDATE schedules SET next_fire_at = :next_fire_at, updated_at = :now WHERE name = :name;

-- name: touch_schedule
UPDATE schedules SET updated_at = :now WHERE name = :name;

-- name: advance_fired
-- Compare-and-set: only the scheduler that still sees :fired_at moves it.
UPDATE schedules SET
    next_fire_at = :next_fire_at, fires = fires + 1, last_fire_at = :fired_at,
    updated_at = :now
WHERE name = :name AND next_fire_at = :fired_at;

-- name: advance_skipped
UPDATE schedules SET next_fire_at = :next_fire_at, updated_at = :now
WHERE name = :name AND next_fire_at = :fired_at;

-- name: delete_schedule
DELETE FROM schedules WHERE name = :name;
