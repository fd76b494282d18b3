"""The event loop every PAN process runs on: uvloop when it is installed, asyncio's own otherwise.

uvloop (the ``fast`` extra) is a drop-in asyncio loop on libuv; a PAN process
spends much of its time in the loop (sockets, timers, callbacks), so it pays
off without changing a line elsewhere. ``PAN_UVLOOP=0`` (or ``pan
--no-uvloop``, which sets it for child processes too) keeps asyncio's default
loop, to compare the two or to rule uvloop out when something misbehaves.
Every entry point that starts a loop does so through ``run``.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["ENV_VAR", "loop_factory", "loop_name", "run", "running_loop_name", "turn_off_uvloop", "uvloop_wanted"]

#: Set to 0 (or false, no, off) to keep asyncio's default loop.
ENV_VAR = "PAN_UVLOOP"
_OFF = {"0", "false", "no", "off"}
_ON = {"", "1", "true", "yes", "on"}
T = TypeVar("T")


def uvloop_wanted(environ: dict[str, str] | None = None) -> bool:
    """False when ``PAN_UVLOOP`` turns uvloop off."""
    value = (os.environ if environ is None else environ).get(ENV_VAR, "1")
    return value.strip().lower() not in _OFF


def env_problem() -> str | None:
    """Why ``PAN_UVLOOP`` is not understood, or None: a typo must not silently mean the default."""
    value = os.environ.get(ENV_VAR, "1")
    if value.strip().lower() in _OFF | _ON:
        return None
    return f"{ENV_VAR}={value!r} is not one of 1, 0 (or true/false, yes/no, on/off)"


def turn_off_uvloop() -> None:
    """asyncio's default loop for this process and, through the environment, every child it starts."""
    os.environ[ENV_VAR] = "0"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's loop factory when it is wanted and importable; None means asyncio's default loop."""
    if not uvloop_wanted():
        return None
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        return None
    return uvloop.new_event_loop  # type: ignore[no-any-return]


def loop_name() -> str:
    """The loop ``run`` would start: ``uvloop X.Y.Z`` or ``asyncio``."""
    factory = loop_factory()
    if factory is None:
        return "asyncio"
    return f"uvloop {importlib.import_module('uvloop').__version__}"


def running_loop_name() -> str:
    """The loop this coroutine runs on (``uvloop`` or ``asyncio``), for start-up log lines."""
    module = type(asyncio.get_running_loop()).__module__
    return "uvloop" if module.startswith("uvloop") else "asyncio"


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)`` on the chosen loop."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
