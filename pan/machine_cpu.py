"""How busy the machine's CPUs are: what ``alpha: "auto"`` backs off from (seed 002 §4.4).

A speculative unit's extra work only pays while the CPU has room for it. A component's own share of
working time does not show that: on a saturated machine a starved component mostly waits for input,
so its share stays low while every core is taken. ``MachineCpu`` reads the machine's CPU times (psutil,
from the ``bench``, ``spark`` and ``deploy`` extras); without psutil it knows nothing and says 0, and
the controller goes by the component alone.
"""

from __future__ import annotations

from collections.abc import Callable

#: Reads the machine's CPU times as (busy seconds, total seconds), all cores together.
CpuTimesReader = Callable[[], tuple[float, float]]


def psutil_reader() -> CpuTimesReader | None:
    """The machine's CPU times through psutil, or None without it."""
    try:
        import psutil
    except ImportError:
        return None

    def read() -> tuple[float, float]:
        times = psutil.cpu_times()
        total = sum(times)
        idle = times.idle + getattr(times, "iowait", 0.0)
        return total - idle, total

    return read


class MachineCpu:
    """The share of the machine's CPU time that was busy since the previous call (0 to 1)."""

    def __init__(self, read: CpuTimesReader | None = None) -> None:
        self._read = read if read is not None else psutil_reader()
        self._last = self._read() if self._read is not None else None

    @property
    def known(self) -> bool:
        return self._read is not None

    def busy_share(self) -> float:
        if self._read is None or self._last is None:
            return 0.0
        busy, total = self._read()
        last_busy, last_total = self._last
        self._last = (busy, total)
        if total <= last_total:
            return 0.0
        return min(1.0, max(0.0, (busy - last_busy) / (total - last_total)))
