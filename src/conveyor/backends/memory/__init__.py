"""The memory backend: ``memory://`` (private) or ``memory://NAME`` (shared in-process)."""

from __future__ import annotations

from conveyor.backends.memory.backend import MemoryBackend
from conveyor.backends.memory.store import drop_memory_store

__all__ = ["MemoryBackend", "drop_memory_store"]
