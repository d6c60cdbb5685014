"""The HTTP service of ``conveyor serve``: health, Prometheus metrics and the
admin API (needs the ``server`` extra: ``pip install 'conveyor[server]'``)."""

from __future__ import annotations

from conveyor.server.app import create_app

__all__ = ["create_app"]
