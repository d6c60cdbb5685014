-- The statements migrate.py runs around the numbered migrations: the advisory
-- lock, the schema and its schema_migrations table, and the version record.
--
-- Parsed once like queries.sql (queries.py): "__schema__" becomes the quoted
-- schema name; values are bound parameters ($n).

-- name: migrations_table_exists
-- $1: the table's qualified name ("schema".schema_migrations), a value here.
SELECT to_regclass($1) IS NOT NULL;

-- name: current_version
SELECT max(version) FROM __schema__.schema_migrations;

-- name: lock_schema
-- Transaction-scoped: many workers starting at once against a fresh database
-- serialise here, and every one but the first finds nothing left to do.
SELECT pg_advisory_xact_lock(hashtextextended($1, 0));

-- name: create_schema
CREATE SCHEMA IF NOT EXISTS __schema__;

-- name: create_migrations_table
CREATE TABLE IF NOT EXISTS __schema__.schema_migrations (
    version integer PRIMARY KEY, name text NOT NULL, applied_at float8 NOT NULL);

-- name: record_migration
INSERT INTO __schema__.schema_migrations (version, name, applied_at)
VALUES ($1, $2, extract(epoch FROM clock_timestamp()));
