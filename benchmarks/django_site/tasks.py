"""The Django task of the pickup benchmark: the moment it starts, as its result."""

from __future__ import annotations

import time

from conveyor.contrib.django.compat import FRAMEWORK

if FRAMEWORK == "django.tasks":
    from django.tasks import task
else:
    from django_tasks import task


@task
def stamp(i: int) -> float:
    return time.time()
