"""The app for ``conveyor worker``: Django's settings, then the backend's app.

    DJANGO_SETTINGS_MODULE=mysite.settings conveyor worker conveyor.contrib.django.worker:app

The worker finds the Django settings as ``manage.py`` does, through
``DJANGO_SETTINGS_MODULE``; run it where your project is importable (its
directory, or on ``PYTHONPATH``). ``django.setup()`` runs at import; ``app`` is
the app of the ``TASKS`` entry named by ``CONVEYOR_DJANGO_BACKEND`` (default
``default``), so the store's URL and the task options come from ``OPTIONS``.
Without ``--queues`` the worker listens on that entry's ``QUEUES``.
"""

from __future__ import annotations

import os

import django

from conveyor.contrib.django.backend import ConveyorBackend, DjangoConveyor
from conveyor.errors import ConfigurationError


def backend_app(alias: str) -> DjangoConveyor:
    """The app behind ``TASKS[alias]``, which must be a :class:`ConveyorBackend`."""
    from conveyor.contrib.django.compat import task_backends

    backend = task_backends[alias]
    if not isinstance(backend, ConveyorBackend):
        raise ConfigurationError(
            f"TASKS[{alias!r}] is {type(backend).__module__}.{type(backend).__name__}, "
            f"not conveyor.contrib.django.ConveyorBackend"
        )
    return backend.app


if not os.environ.get("DJANGO_SETTINGS_MODULE"):
    raise ConfigurationError(
        "conveyor.contrib.django.worker needs DJANGO_SETTINGS_MODULE (e.g. mysite.settings)"
    )
django.setup()
app = backend_app(os.environ.get("CONVEYOR_DJANGO_BACKEND", "default"))
