"""Settings of the test project. The worker subprocess gets its store from
CONVEYOR_URL; the test process points TASKS at each test's store itself."""

from __future__ import annotations

import os

SECRET_KEY = "conveyor-tests-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["django_project.shop"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DJANGO_TEST_DB", ":memory:"),
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"


def conveyor_tasks(url: str) -> dict[str, dict[str, object]]:
    return {
        "default": {
            "BACKEND": "conveyor.contrib.django.ConveyorBackend",
            "QUEUES": ["default", "emails"],
            # One attempt, as Django's own backends make: a failure is final.
            "OPTIONS": {"url": url, "attempts": 1},
        }
    }


TASKS = conveyor_tasks(os.environ.get("CONVEYOR_URL", "memory://"))
