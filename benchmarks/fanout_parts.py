"""Child processes of the fan-out benchmarks: the paced feeder and the client processes.

Both PAN and Redis get the same DEBS-like payload for ``SENSOR105`` at the same
rate, from the same feeder loop; the send time is the row's ``ts`` field, in
picoseconds like DEBS timestamps: ``TS0 + (wall clock - epoch_ns) * 1000``
(``epoch_ns`` comes from the parent; ps since 1970 would not fit 64 bits), so
a client computes the delivery delay of every tuple from ``ts`` alone.

* PAN feeder: CSV rows into the forwarder's ingest port (what sensors do);
  the forwarder serves them as ``{"i":..,"sid":105,"ts":..,"x":..,...}``.
* Redis feeder: ``XADD SENSOR105 MAXLEN ~ B * d <that JSON without "i">``,
  pipelined per tick.  Redis' entry id takes the role of PAN's index.

Client processes run many subscribers sharing one connection pool, so the
client side spreads over processes (and cores) instead of one event loop.
Run as ``python -m benchmarks.fanout_parts feed|clients CONFIG_JSON``.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import random
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from pan.util import eventloop

SID = 105
STREAM = f"SENSOR{SID}"
TICK_S = 0.005
HIST_BINS = 1200  # log-spaced delay histogram, 10 us .. 100 s (~1.3 % per bin)
HIST_LO_US, HIST_HI_US = 10.0, 100e6
FIELDS = ("sid", "ts", "x", "y", "z", "v", "a", "vx", "vy", "vz", "ax", "ay", "az")
TS0 = 10_629_342_490_369_879  # ps, the first timestamp of the DEBS 2013 data
_JSON = ("{" + ",".join(f'"{name}":%d' for name in FIELDS) + "}").encode()


def payload_tails(count: int = 512, seed: int = 105) -> list[tuple[int, ...]]:
    """The 11 fields after ``ts`` (positions in mm, speeds in um/s...), as in DEBS 2013."""
    rng = random.Random(seed)
    return [
        (
            rng.randint(-52_000, 52_000), rng.randint(-33_000, 33_000), rng.randint(-200, 2_500),
            rng.randint(0, 9_000_000), rng.randint(0, 40_000_000),
            *(rng.randint(-10_000, 10_000) for _ in range(6)),
        )
        for _ in range(count)
    ]


def csv_row(ts_ps: int, tail: tuple[int, ...]) -> bytes:
    return b"%d,%d," % (SID, ts_ps) + b",".join(b"%d" % v for v in tail) + b"\n"


def json_row(ts_ps: int, tail: tuple[int, ...]) -> bytes:
    return _JSON % (SID, ts_ps, *tail)


# --- feeder -----------------------------------------------------------------------------


async def feed(config: dict[str, Any]) -> None:
    """Send ``rate`` rows/s in 5 ms ticks until SIGTERM; the count goes to stdout at exit."""
    rate = float(config["rate"])
    epoch_ns = int(config["epoch_ns"])
    tails = payload_tails()
    send: Callable[[list[tuple[int, tuple[int, ...]]]], Awaitable[None]]
    closer: Callable[[], Awaitable[None]]
    if config["kind"] == "pan":
        _reader, writer = await asyncio.open_connection(config["host"], int(config["port"]))

        async def send(rows: list[tuple[int, tuple[int, ...]]]) -> None:
            writer.write(b"".join(csv_row(ts, tail) for ts, tail in rows))
            await writer.drain()

        async def closer() -> None:
            writer.close()

    else:
        import redis.asyncio as aioredis

        client = aioredis.Redis(host=config["host"], port=int(config["port"]))
        maxlen = int(config["maxlen"])
        await client.ping()

        async def send(rows: list[tuple[int, tuple[int, ...]]]) -> None:
            pipe = client.pipeline(transaction=False)
            for ts, tail in rows:
                pipe.xadd(STREAM, {"d": json_row(ts, tail)}, maxlen=maxlen, approximate=True)
            await pipe.execute()

        async def closer() -> None:
            await client.aclose()

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(orjson.dumps({"ready": True}).decode(), flush=True)
    started = time.perf_counter()
    sent = 0
    while not stop.is_set():
        due = int(rate * (time.perf_counter() - started)) - sent
        if due > 0:
            now_ps = TS0 + (time.time_ns() - epoch_ns) * 1000
            await send([(now_ps, tails[(sent + k) % len(tails)]) for k in range(due)])
            sent += due
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(TICK_S):
                await stop.wait()
    await closer()
    print(orjson.dumps({"sent": sent, "seconds": time.perf_counter() - started}).decode(), flush=True)


# --- clients ----------------------------------------------------------------------------


class Recorder:
    """Delays (us) of one subscriber's tuples received inside the measurement window."""

    __slots__ = ("delays", "epoch_ns", "t0", "t1")

    def __init__(self, epoch_ns: int) -> None:
        self.delays = array.array("q")
        self.epoch_ns = epoch_ns
        self.t0 = self.t1 = 0  # ns; 0 = window not set yet

    def add(self, ts_ps: list[int]) -> None:
        now = time.time_ns()
        if self.t0 <= now < self.t1:
            now_us = (now - self.epoch_ns) // 1000
            self.delays.extend([now_us - (ts - TS0) // 1_000_000 for ts in ts_ps])


async def pan_subscriber(config: dict[str, Any], session: Any, rec: Recorder, ready: asyncio.Event) -> None:
    from pan.input.subscriber import StreamSubscriber

    sub = StreamSubscriber(
        STREAM,
        config["repository"],
        start="latest",
        reset="latest",
        page_size=int(config["page"]),
        max_wait_ms=int(config["wait_ms"]),
        session=session,
    )
    try:
        await sub.fetch()  # positions at the newest tuple
        ready.set()
        await config["_go"].wait()  # nobody pulls before all processes are connected: a fast, fair start
        while True:
            fetch = await sub.fetch()
            if fetch.tuples:
                rec.add([t["ts"] for t in fetch.tuples])
    finally:
        stats = {"missed": sub.stats.missed, "failovers": sub.stats.failovers, "errors": sub.stats.errors}
        config.setdefault("_stats", []).append(stats)


async def redis_subscriber(config: dict[str, Any], client: Any, rec: Recorder, ready: asyncio.Event) -> None:
    last = config["start_id"]
    ready.set()
    await config["_go"].wait()
    page, block = int(config["page"]), int(config["wait_ms"])
    loads = orjson.loads
    stop: asyncio.Event = config["_stop"]
    while not stop.is_set():  # redis-py does not survive cancelling a blocked XREAD: end between calls
        answer = await client.xread({STREAM: last}, count=page, block=block)
        if answer:
            entries = answer[0][1]
            last = entries[-1][0]
            rec.add([loads(fields[b"d"])["ts"] for _id, fields in entries])


async def run_clients(config: dict[str, Any]) -> None:
    """Start ``n`` subscribers, say ready, read the window from stdin, report after it."""
    import numpy as np

    n = int(config["n"])
    config["_stop"], config["_go"] = asyncio.Event(), asyncio.Event()
    recorders = [Recorder(int(config["epoch_ns"])) for _ in range(n)]
    readies = [asyncio.Event() for _ in range(n)]
    closer: Callable[[], Awaitable[None]]
    if config["kind"] == "pan":
        import aiohttp

        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        tasks = [
            asyncio.create_task(pan_subscriber(config, session, r, e))
            for r, e in zip(recorders, readies, strict=True)
        ]

        async def closer() -> None:
            await session.close()

    else:
        import redis.asyncio as aioredis

        pool = aioredis.ConnectionPool(host=config["host"], port=int(config["port"]), max_connections=n + 8)
        client = aioredis.Redis(connection_pool=pool)
        newest = await client.xrevrange(STREAM, count=1)
        config["start_id"] = newest[0][0] if newest else b"0-0"
        tasks = [
            asyncio.create_task(redis_subscriber(config, client, r, e))
            for r, e in zip(recorders, readies, strict=True)
        ]

        async def closer() -> None:
            await client.aclose()
            await pool.disconnect()

    async with asyncio.timeout(float(config.get("startup_s", 60))):
        await asyncio.gather(*(e.wait() for e in readies))
    print(orjson.dumps({"ready": n}).decode(), flush=True)
    window = orjson.loads(await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline))
    t0, t1 = int(window["t0_ns"]), int(window["t1_ns"])
    config["_go"].set()  # every client process is connected by now: all start pulling together
    for rec in recorders:
        rec.t0, rec.t1 = t0, t1
    await asyncio.sleep(max(0.0, (t0 - time.time_ns()) / 1e9))
    cpu0 = time.process_time()
    await asyncio.sleep(max(0.0, (t1 - time.time_ns()) / 1e9))
    cpu1 = time.process_time()
    crashed = [t for t in tasks if t.done() and not t.cancelled() and t.exception() is not None]
    config["_stop"].set()
    if config["kind"] == "redis":
        await asyncio.wait(tasks, timeout=int(config["wait_ms"]) / 1000 + 5)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await closer()
    edges = np.geomspace(HIST_LO_US, HIST_HI_US, HIST_BINS + 1)
    pooled = np.concatenate([np.frombuffer(r.delays, dtype=np.int64) for r in recorders]) if n else np.zeros(0)
    hist, _ = np.histogram(np.clip(pooled, HIST_LO_US, HIST_HI_US - 1), bins=edges)
    per_client = [
        (len(r.delays), *(np.percentile(np.frombuffer(r.delays, dtype=np.int64), [50, 99]).tolist() or [None, None]))
        if r.delays
        else (0, None, None)
        for r in recorders
    ]
    stats = config.get("_stats", [])
    result = {
        "n": n,
        "delivered": int(pooled.size),
        "hist": hist.tolist(),
        "per_client": per_client,  # (tuples, p50_us, p99_us)
        "missed": sum(s["missed"] for s in stats),
        "failovers": sum(s["failovers"] for s in stats),
        "errors": sum(s["errors"] for s in stats),
        "crashed": [repr(t.exception()) for t in crashed][:3],
        "cpu_s": cpu1 - cpu0,
        "window_s": (t1 - t0) / 1e9,
    }
    print(orjson.dumps(result).decode(), flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    mode, config = argv[0], orjson.loads(argv[1])
    if mode == "feed":
        eventloop.run(feed(config))
    elif mode == "clients":
        eventloop.run(run_clients(config))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
