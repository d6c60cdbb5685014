-- The PRAGMAs of conveyor's SQLite connections, one named block per use
-- (loaded once by queries.py into ``P``; see connection.py and checkpoint.py).
--
-- PRAGMA values cannot be bound as parameters, so every setting used is a
-- fixed statement here; a block may hold several, run in order. Which
-- connection runs which block: docs/explanation/sqlite.md.

-- name: journal_wal
-- Every tuned connection checks that the file is (now) in WAL mode.
PRAGMA journal_mode = WAL;

-- One block per ``?synchronous=`` level of the URL.
-- name: synchronous_off
PRAGMA synchronous = OFF;

-- name: synchronous_normal
PRAGMA synchronous = NORMAL;

-- name: synchronous_full
PRAGMA synchronous = FULL;

-- name: synchronous_extra
PRAGMA synchronous = EXTRA;

-- name: tuning
-- The writer and the reader (not the watcher, which only polls data_version).
PRAGMA foreign_keys = OFF;
PRAGMA temp_store = MEMORY;
-- Small caches, no memory map: the hot path's working set (the tails of the
-- jobs table and its partial indexes) is a few hundred pages, and the OS
-- page cache serves the rest. A bigger cache or a memory map only made the
-- process grow with the database (pages touched by a memory map count in
-- its RSS), at no measurable gain in speed.
-- 2 MiB of page cache (the writer's: 4 MiB, below).
PRAGMA cache_size = -2048;
PRAGMA mmap_size = 0;
-- Truncate the WAL back to 64 MiB.
PRAGMA journal_size_limit = 67108864;

-- name: writer_tuning
-- After ``tuning``, for the writer only. Its own automatic checkpoint at
-- 4,000 WAL pages (4 KiB each) is only a backstop: the background
-- Checkpointer (checkpoint.py) does the copying.
PRAGMA wal_autocheckpoint = 4000;
-- Room for a 5,000-job batch without spilling.
PRAGMA cache_size = -4096;

-- name: checkpointer_tuning
-- The checkpointer's connection: a checkpoint does not read through the cache.
PRAGMA cache_size = 16;

-- name: checkpoint
-- Passive: never waits for (or blocks) writers or readers, copies what it can.
PRAGMA wal_checkpoint(PASSIVE);

-- name: user_version
-- The schema version, set by the last statement of each migration.
PRAGMA user_version;
