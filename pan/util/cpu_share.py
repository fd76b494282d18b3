"""How busy the CPU is for a worker: what ``alpha: "auto"`` backs off from (seed 002 §4.4).

A speculative unit's extra work only pays while the CPU has room for it. A component's own share of
working time does not show that: on a saturated machine a starved component mostly waits for input,
so its share stays low while every core is taken. Two readers say more, each as (busy seconds, total
seconds) that ``BusyShare`` turns into a share since the previous reading:

- ``loop_reader``: the worker's event-loop thread, from Linux's scheduler statistics
  (``/proc/thread-self/schedstat``). Busy is the time the thread ran *or waited in a run queue*, so it
  counts the process's own load and the CPU it could not get because other programs held every core.
  It is what a worker's latency depends on: every worker of a peer shares that one thread.
- ``machine_reader``: every core of the machine (psutil, from the ``bench``, ``spark`` and ``deploy``
  extras). It also counts programs whose load never reaches this worker, such as a benchmark's driver.

Without its source (another OS, no psutil) a reader is None and the share is 0: the controller then goes
by the component's working time alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

#: Reads CPU time as (busy seconds, total seconds).
CpuTimesReader = Callable[[], tuple[float, float]]

#: The calling thread's scheduler statistics: ns on the CPU, ns waiting in a run queue, time slices.
SCHEDSTAT = Path("/proc/thread-self/schedstat")


def machine_reader() -> CpuTimesReader | None:
    """The machine's CPU times, all cores together, through psutil; None without it."""
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


def loop_reader(schedstat: Path = SCHEDSTAT) -> CpuTimesReader | None:
    """The calling thread's running plus run-queue time against wall time; None where the kernel has no
    schedstat. Call it from the thread to watch (a worker's event loop)."""
    try:
        schedstat.read_bytes()
    except OSError:
        return None

    def read() -> tuple[float, float]:
        running_ns, waiting_ns = schedstat.read_bytes().split()[:2]
        return (int(running_ns) + int(waiting_ns)) / 1e9, time.monotonic()

    return read


READERS: dict[str, Callable[[], CpuTimesReader | None]] = {"loop": loop_reader, "machine": machine_reader}


class BusyShare:
    """The share of time that was busy since the previous call (0 to 1), from one reader."""

    def __init__(self, read: CpuTimesReader | None) -> None:
        self._read = read
        self._last = read() if read is not None else None

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
