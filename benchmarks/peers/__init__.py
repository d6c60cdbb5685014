"""The peers conveyor is measured against on PostgreSQL and Redis: one module each,
holding both the app its worker loads and the producer the benchmark drives."""
