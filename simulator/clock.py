"""Time providers: where the simulator gets "now" from.

Pacing must agree across machines, so the simulator never reads the system
clock directly; it asks a provider.  Local machine time is the default,
WeakTrueTime (``simulator.wtt``) makes several machines agree, and
``SkewedTime`` lets tests and demos pretend a machine's clock is off without
ever touching the real system clock.
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class TimeProvider(Protocol):
    """Anything that tells the current time as integer nanoseconds since the epoch."""

    def now_ns(self) -> int: ...


class LocalTime:
    """The machine's own wall clock."""

    def now_ns(self) -> int:
        return time.time_ns()


class SkewedTime:
    """A provider that is ``offset_ns`` ahead of ``base`` and runs ``drift_ppm`` fast.

    Drift is measured from the moment of construction, so a fresh instance
    starts exactly ``offset_ns`` away from its base.  ``step`` moves the clock
    by a fixed amount later on (a clock that is set backwards or forwards).
    """

    def __init__(self, base: TimeProvider | None = None, offset_ns: int = 0, drift_ppm: float = 0.0) -> None:
        self.base = base or LocalTime()
        self.offset_ns = offset_ns
        self.drift_ppm = drift_ppm
        self._anchor = self.base.now_ns()

    def step(self, delta_ns: int) -> None:
        self.offset_ns += delta_ns

    def now_ns(self) -> int:
        base = self.base.now_ns()
        return base + self.offset_ns + int((base - self._anchor) * self.drift_ppm * 1e-6)
