"""Which asyncio event loop a long-running command runs on.

``auto`` (the default) takes uvloop when it is installed (``pip install
'conveyor[uvloop]'``) and the standard loop otherwise, the way uvicorn does;
``asyncio`` and ``uvloop`` ask for one. uvloop's callbacks, tasks, timers and
sockets cost a fraction of the standard loop's, and a worker spends much of its
time there: a job is a task, a timer and a few callbacks.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

from conveyor.errors import ConfigurationError

T = TypeVar("T")

LoopName = Literal["auto", "asyncio", "uvloop"]
LOOP_NAMES: tuple[LoopName, ...] = ("auto", "asyncio", "uvloop")


def resolve_loop(name: str) -> Literal["asyncio", "uvloop"]:
    """The loop ``name`` stands for here. Raises :class:`ConfigurationError` for
    an unknown name, or for ``uvloop`` when it is not installed."""
    if name not in LOOP_NAMES:
        raise ConfigurationError(f"loop: {name!r} is not one of {', '.join(LOOP_NAMES)}")
    available = importlib.util.find_spec("uvloop") is not None
    if name == "uvloop" and not available:
        raise ConfigurationError(
            "loop: uvloop is not installed (pip install 'conveyor[uvloop]'), or use --loop asyncio"
        )
    if name == "auto":
        return "uvloop" if available else "asyncio"
    return "uvloop" if name == "uvloop" else "asyncio"


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    if resolve_loop(name) == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop


def loop_name() -> str:
    """``uvloop`` or ``asyncio``: what the running loop is (for the logs)."""
    module = type(asyncio.get_running_loop()).__module__
    return "uvloop" if module.startswith("uvloop") else "asyncio"


def run(main: Coroutine[Any, Any, T], loop: str = "auto") -> T:
    """``asyncio.run(main)`` on the loop ``loop`` names."""
    try:
        factory = loop_factory(loop)
    except BaseException:
        main.close()  # never awaited: no "coroutine was never awaited" warning
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
