"""The workload of `pan bench runtime`: DEBS sensor rows and the forwarder worker process they are ingested into.

Shared with `pan bench wire` and `pan bench security` (benchmarks/wire_bench.py, benchmarks/security_bench.py),
which fill the same worker the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
import time
from typing import TYPE_CHECKING, Any

import orjson

from benchmarks import common
from benchmarks.runtime_worker import HOST

if TYPE_CHECKING:  # imported where used: `pan` imports every benchmark module on start
    import aiohttp
    import psutil

PAGE = 1000  # n= of every throughput fetch
LONG_POLL_MS = 1000
THROUGHPUT_STREAM = "SENSOR4"
LATENCY_STREAM = "LAT"
START_TS = 10_629_342_490_369_879  # ps, the order of magnitude of the DEBS 2013 timestamps
TS_STEP = 5_000_000_000  # ps between two rows of one sensor (200 Hz)


# --- DEBS sensor rows ------------------------------------------------------------------


def sensor_tails(count: int, seed: int = 2013) -> list[bytes]:
    """``count`` CSV rows without their leading sensor id: ``,ts,x,y,z,v,a,vx,...,az\\n``.

    Magnitudes follow the DEBS 2013 data: positions in mm on a ~105 x 68 m
    field, |v| in um/s, |a| in um/s^2, direction components scaled to 10^4.
    """
    rng = random.Random(seed)
    rows = []
    for k in range(count):
        fields = (
            START_TS + k * TS_STEP + rng.randrange(-50_000, 50_000),
            rng.randint(-52_000, 52_000),
            rng.randint(-33_000, 33_000),
            rng.randint(-200, 2_500),
            rng.randint(0, 9_000_000),
            rng.randint(0, 40_000_000),
            rng.randint(-10_000, 10_000),
            rng.randint(-10_000, 10_000),
            rng.randint(-10_000, 10_000),
            rng.randint(-10_000, 10_000),
            rng.randint(-10_000, 10_000),
            rng.randint(-10_000, 10_000),
        )
        rows.append(("," + ",".join(map(str, fields)) + "\n").encode())
    return rows


def sensor_lines(sid: int, tails: list[bytes]) -> list[bytes]:
    prefix = b"%d" % sid
    return [prefix + tail for tail in tails]


# --- the worker process ----------------------------------------------------------------


class WorkerProcess(common.Child):
    """A forwarder worker (and maybe a repository) in its own process (benchmarks/runtime_worker.py)."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__([sys.executable, "-m", "benchmarks.runtime_worker", orjson.dumps(config).decode()],
                         startup_s=20.0)
        self.info: dict[str, Any] = {}

    async def start(self) -> WorkerProcess:
        await super().start()
        self.info = orjson.loads(self.ready_line)
        return self


# --- helpers -----------------------------------------------------------------------------


async def send_all(port: int, lines: list[bytes], chunk: int = 20_000) -> None:
    _reader, writer = await asyncio.open_connection(HOST, port)
    try:
        for start in range(0, len(lines), chunk):
            writer.write(b"".join(lines[start : start + chunk]))
            await writer.drain()
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def output_lasts(session: aiohttp.ClientSession, worker_port: int, **request: Any) -> dict[str, int]:
    """Each output's last index (``request``: e.g. ``headers`` with a token, ``ssl`` and ``scheme`` for HTTPS)."""
    scheme = request.pop("scheme", "http")
    async with session.get(f"{scheme}://{HOST}:{worker_port}/streams", **request) as response:
        info = orjson.loads(await response.read())
    return {name: out["last"] for name, out in info["outputs"].items()}


async def fill(
    session: aiohttp.ClientSession, proc: WorkerProcess, lines: list[bytes], expect: dict[str, int], timeout_s: float,
    **request: Any,
) -> float:
    """Write ``lines`` into the ingest port; wait until every stream holds its last index (``request``: as for
    ``output_lasts``)."""
    started = time.perf_counter()
    await send_all(proc.info["ingest_port"], lines)
    deadline = started + timeout_s
    while True:
        lasts = await output_lasts(session, proc.info["worker_port"], **dict(request))
        if all(lasts.get(name, -1) >= last for name, last in expect.items()):
            return time.perf_counter() - started
        if time.perf_counter() > deadline:
            raise RuntimeError(f"ingest did not deliver in {timeout_s} s: {lasts} (want {expect})")
        await asyncio.sleep(0.02)


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system
