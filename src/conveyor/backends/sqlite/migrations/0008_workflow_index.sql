-- Migration 0008: an index on the jobs of a workflow.
--
-- Applied by migrate.py inside one BEGIN IMMEDIATE transaction (see 0001).
-- app.get_workflow, the workflow events' counts and workflow retention read a
-- workflow's jobs by workflow_id; without an index each of them scanned the
-- whole jobs table. Partial: a job outside any workflow pays nothing for it,
-- and no column of it changes with the job's state, so claims and settles of
-- workflow jobs do not touch it either (only their insert and delete do).
CREATE INDEX jobs_workflow ON jobs (workflow_id, id) WHERE workflow_id IS NOT NULL;

PRAGMA user_version = 8;
