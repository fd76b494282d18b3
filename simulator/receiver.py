"""Debugging stream receiver: how far apart in event time do the sensors arrive?

It listens like a worker's ingest port (the inter-PAN line protocol of
DESIGN §4: DEBS CSV rows become ``SENSOR<sid>``, JSON lines carry their own
``stream``), accepts every stream, and keeps each stream's latest ``ts``.
Several simulator processes replaying the same match at the same moment
should deliver nearly equal latest timestamps; a clock offset between their
machines shows up directly as spread.  This is how WeakTrueTime is verified
(seed 003 §5.1): periodically it reports, over the sensor streams,

- ``std_ms``: the sample standard deviation of the latest timestamps, and
- ``median_diff_ms``: the median absolute difference to their mean,

plus moving averages of both over the last ``window`` reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import statistics
import sys
import time
from collections import deque
from typing import Any, TextIO

import orjson

from pan.ingest.lines import Row
from pan.ingest.server import IngestServer
from pan.ingest.settings import IngestSettings
from simulator.debs_rows import SENSOR_PREFIX, DebsCsvDecoder

PS_PER_MS = 10**9


class _AnyStream(set[str]):
    """An "expected streams" set that admits every name: the receiver takes whatever comes."""

    def __contains__(self, item: object) -> bool:
        return True


def spread_stats(latest: dict[str, int]) -> dict[str, Any]:
    """Seed §5.1 statistics of the latest timestamps (ps) of the given streams, in ms."""
    n = len(latest)
    if n == 0:
        return {"sensors": 0, "std_ms": None, "median_diff_ms": None, "range_ms": None}
    base = min(latest.values())  # ts are ~1e16 ps: subtract first so floats keep the precision
    xs = [(t - base) / PS_PER_MS for t in latest.values()]
    mean = sum(xs) / n
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1)) if n > 1 else 0.0
    return {
        "sensors": n,
        "std_ms": std,
        "median_diff_ms": statistics.median(abs(x - mean) for x in xs),
        "range_ms": max(xs),
        "mean_ts": base + round(mean * PS_PER_MS),
    }


class DebugReceiver:
    """TCP ingest endpoint that tracks each stream's latest ts and reports the spread."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, window: int = 10) -> None:
        settings = IngestSettings(decoder=DebsCsvDecoder)  # the rows `pan simulate` sends
        self.server = IngestServer(host, port, _AnyStream(), self._deliver, settings=settings)
        self.latest: dict[str, int] = {}
        self.rows: dict[str, int] = {}
        self.history: deque[dict[str, Any]] = deque(maxlen=window)

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> None:
        await self.server.start()

    async def stop(self) -> None:
        await self.server.stop()

    @property
    def open_connections(self) -> int:
        """Senders still connected (their unread bytes may still move the latest timestamps)."""
        return len(self.server._connections)

    def reset(self) -> None:
        """Forget every stream (between experiments on one receiver)."""
        self.latest.clear()
        self.rows.clear()
        self.history.clear()

    def _deliver(self, batches: dict[str, list[Row]]) -> None:
        for stream, rows in batches.items():
            row_ts = self.server.row_format(stream).row_ts
            newest = max(row_ts(r) for r in rows)
            old = self.latest.get(stream)
            if old is None or newest > old:
                self.latest[stream] = newest
            self.rows[stream] = self.rows.get(stream, 0) + len(rows)

    def sensor_latest(self) -> dict[str, int]:
        """Latest ts per sensor stream (non-sensor streams such as INTERRUPTIONS are sparse: left out)."""
        return {s: t for s, t in self.latest.items() if s.startswith(SENSOR_PREFIX)}

    def stats(self) -> dict[str, Any]:
        """A snapshot of the spread now (does not enter the moving averages)."""
        out = spread_stats(self.sensor_latest())
        counters = self.server.counters
        out.update(rows=sum(self.rows.values()), streams=len(self.latest), malformed=counters.malformed,
                   connections=counters.connections)
        return out

    def report(self) -> dict[str, Any]:
        """A snapshot that enters the moving averages; what ``run_reports`` prints."""
        out = {"time_ns": time.time_ns(), **self.stats()}
        if out["std_ms"] is not None:
            self.history.append(out)
        for key in ("std_ms", "median_diff_ms"):
            values = [h[key] for h in self.history]
            out[f"{key}_avg"] = sum(values) / len(values) if values else None
        return out

    async def run_reports(self, every_s: float, out: TextIO, count: int | None = None) -> None:
        """Print a JSON line every ``every_s`` seconds (``count`` times, or until cancelled)."""
        printed = 0
        while count is None or printed < count:
            await asyncio.sleep(every_s)
            out.write(orjson.dumps(self.report()).decode() + "\n")
            out.flush()
            printed += 1


async def serve(host: str, port: int, every_s: float, count: int | None = None, window: int = 10,
                out: TextIO | None = None, stop: asyncio.Event | None = None) -> DebugReceiver:
    """Run a receiver until ``count`` reports were printed or ``stop`` is set."""
    receiver = DebugReceiver(host, port, window)
    await receiver.start()
    print(f"receiver listening on {host}:{receiver.port}", file=sys.stderr, flush=True)
    reports = asyncio.create_task(receiver.run_reports(every_s, out or sys.stdout, count))
    waiters = [reports] + ([asyncio.create_task(stop.wait())] if stop is not None else [])
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waiters:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await receiver.stop()
    return receiver
