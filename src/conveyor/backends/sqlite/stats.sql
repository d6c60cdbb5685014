-- Job statistics: what workers report about finished runs (see stats.py).
-- Tables: job_stat_totals (cumulative, never pruned) and job_stat_series
-- (one row per minute and (task, queue, status), pruned by age).
-- ``buckets`` is a JSON array of per-bucket counts (DURATION_BUCKETS order).

-- name: total_row
SELECT count, duration_sum, buckets FROM job_stat_totals
WHERE task = :task AND queue = :queue AND status = :status;

-- name: upsert_total
INSERT INTO job_stat_totals (task, queue, status, count, duration_sum, buckets)
VALUES (:task, :queue, :status, :count, :duration_sum, :buckets)
ON CONFLICT (task, queue, status) DO UPDATE SET
    count = excluded.count,
    duration_sum = excluded.duration_sum,
    buckets = excluded.buckets;

-- name: series_row
SELECT count, duration_sum, buckets FROM job_stat_series
WHERE minute = :minute AND task = :task AND queue = :queue AND status = :status;

-- name: upsert_series
INSERT INTO job_stat_series (minute, task, queue, status, count, duration_sum, buckets)
VALUES (:minute, :task, :queue, :status, :count, :duration_sum, :buckets)
ON CONFLICT (minute, task, queue, status) DO UPDATE SET
    count = excluded.count,
    duration_sum = excluded.duration_sum,
    buckets = excluded.buckets;

-- name: list_totals
SELECT task, queue, status, count, duration_sum, buckets FROM job_stat_totals
ORDER BY task, queue, status;

-- name: list_series
SELECT minute, task, queue, status, count, duration_sum, buckets FROM job_stat_series
WHERE minute >= :since
ORDER BY minute, task, queue, status;

-- name: prune_series
DELETE FROM job_stat_series WHERE minute < :before;
