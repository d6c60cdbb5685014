"""A minimal Django project for the Django Tasks pickup benchmark
(benchmarks/observability.py). The store comes from ``CONVEYOR_URL``."""

from __future__ import annotations

import os

SECRET_KEY = "conveyor-benchmarks-only"
DEBUG = False
USE_TZ = True
INSTALLED_APPS: list[str] = []
DATABASES: dict[str, object] = {}
TASKS = {
    "default": {
        "BACKEND": "conveyor.contrib.django.ConveyorBackend",
        "QUEUES": ["default"],
        "OPTIONS": {"url": os.environ["CONVEYOR_URL"], "attempts": 1},
    }
}
