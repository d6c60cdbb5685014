"""Maintenance services: one per file, each idempotent and safe on many nodes."""
