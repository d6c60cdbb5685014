"""What every endpoint reaches through ``request.app.state.conveyor``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from conveyor.server.auth import TokenAuth
from conveyor.server.dashboard.session import SessionStore

if TYPE_CHECKING:
    from conveyor.app import Conveyor
    from conveyor.dispatch.probe import BrokerProbe
    from conveyor.server.dashboard.live import LiveHub
    from conveyor.settings import Settings


@dataclass(slots=True)
class ServerState:
    app: Conveyor
    settings: Settings
    auth: TokenAuth
    sessions: SessionStore
    started: bool = False
    #: Reads the RabbitMQ broker when dispatch is configured (health, metrics, dashboard).
    broker: BrokerProbe | None = None
    #: The dashboard's live-update streams (set by ``create_app``).
    live: LiveHub = field(init=False)
