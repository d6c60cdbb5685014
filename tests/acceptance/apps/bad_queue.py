"""An app whose queue options are refused at import (a weight of 0)."""

from __future__ import annotations

from conveyor.app import Conveyor

app = Conveyor()
app.queue("emails", fairness="tenant", weights={"org-1": 0})
