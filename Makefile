# Thin wrappers: the scripts are the source of truth (CI runs scripts/test.sh).
.PHONY: help test lint fix demo bench chaos services-check

help:
	@echo "make test            the whole gate, as CI runs it (scripts/test.sh)"
	@echo "make lint            ruff check, ruff format --check, mypy"
	@echo "make fix             ruff --fix and ruff format, then lint"
	@echo "make demo            install and run 'conveyor demo'"
	@echo "make bench           benchmarks vs Huey (benchmarks/run.py; ARGS='--only w1')"
	@echo "make chaos           the chaos suite, quick and long, writing docs/reliability.md"
	@echo "make services-check  start temporary PostgreSQL/Redis, check them, stop them"

test:
	scripts/test.sh

lint:
	scripts/lint.sh

fix:
	scripts/lint.sh --fix

demo:
	scripts/demo.sh

bench:
	scripts/bench.sh $(ARGS)

chaos:
	scripts/chaos.sh $(ARGS)

services-check:
	CONVEYOR_FORCE_OWN_SERVICES=1 scripts/services.sh -- scripts/check_services.sh
