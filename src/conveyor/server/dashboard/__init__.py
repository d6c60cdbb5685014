"""The web dashboard ``conveyor serve`` answers at ``/``: server-rendered pages,
live fragments, and actions that need the ``admin`` scope and a CSRF token.

See docs/how-to/dashboard.md.
"""

from __future__ import annotations

from conveyor.server.dashboard.routes import ROUTES

__all__ = ["ROUTES"]
