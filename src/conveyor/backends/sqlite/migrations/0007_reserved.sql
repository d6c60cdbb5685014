-- Migration 0007: reserved.
--
-- Number 0007 belongs to a migration written on another branch; it lands
-- first and replaces this file. Until then this one only moves the version, so
-- that 0008 (workflow index) can follow: migrate.py applies migrations
-- numbered 1..n without gaps (user_version records only the last one applied).

PRAGMA user_version = 7;
