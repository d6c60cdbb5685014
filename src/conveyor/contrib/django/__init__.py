"""Django Tasks on conveyor (extra ``django``): :class:`ConveyorBackend` for
``django.tasks`` (Django >= 6.0) and its backport ``django_tasks`` (Django
4.2-5.2); ``conveyor.contrib.django.worker:app`` for ``conveyor worker``."""

from conveyor.contrib.django.backend import ConveyorBackend

__all__ = ["ConveyorBackend"]
