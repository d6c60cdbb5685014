"""``APP`` arguments: ``module:attribute`` naming a :class:`~conveyor.app.Conveyor`.

Like uvicorn, the current directory goes first on ``sys.path`` so that
``conveyor worker myapp:app`` finds ``./myapp.py``. The attribute may be dotted
(``pkg.jobs:tasks.app``).
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback

from conveyor.app import Conveyor
from conveyor.cli.errors import AppLoadError
from conveyor.errors import ConfigurationError
from conveyor.settings import load_settings


def load_app(spec: str, url: str | None = None) -> Conveyor:
    """Import ``spec`` and return its app; ``url`` (an explicit ``--url``) replaces its URL."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise AppLoadError(f"APP must look like module:attribute (like myapp:app), not {spec!r}")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise AppLoadError(
                f"could not import module {module_name!r}: no such module "
                f"(looked in {cwd} and on sys.path)"
            ) from None
        raise AppLoadError(f"importing {module_name!r} failed: {exc}") from None
    except ConfigurationError:  # the app's settings (CONVEYOR_*, conveyor.toml): one line
        raise
    except Exception as exc:
        # The app's own code raised: its traceback is what the user needs to fix it.
        traceback.print_exception(exc, file=sys.stderr)
        raise AppLoadError(
            f"importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from None
    target: object = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise AppLoadError(f"module {module_name!r} has no attribute {attribute!r}") from None
    if not isinstance(target, Conveyor):
        raise AppLoadError(f"{spec} is a {type(target).__name__}, not a conveyor.Conveyor app")
    if url is not None and url != target.url:
        use_url(target, url)
    return target


def use_url(app: Conveyor, url: str) -> None:
    """Point ``app`` at another backend before it connects (an explicit ``--url``).

    Every other setting of the app is kept; the new one is validated as usual.
    """
    load_settings(url=url)  # validates the URL, naming the key when it is wrong
    app.settings = app.settings.model_copy(update={"url": url})
