"""Processes that `pan bench network` runs inside its namespaces.

* ``sidecar``: the delaying proxies of one namespace (benchmarks.delay_proxy),
  one per remote PAN service, on 127.0.0.1:<the service's port>, forwarding
  to the service's address in its own namespace.  Reads delay models as JSON
  lines on stdin and applies them live (open keep-alive connections too),
  answering ``{"ok": true}``.
* ``sender``: JSON sensor lines ``{"stream":"LAT","ts":..,"sent_ns":..}`` at a
  fixed rate into the forwarder's ingest port, until SIGTERM.
* ``probe``: one subscriber per publisher path; for each phase it is told on
  stdin it reports the query delays (receive time - ``sent_ns``) of the
  tuples sent inside the phase's window.

Run as ``python -m benchmarks.network_parts MODE CONFIG_JSON``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from typing import Any

import orjson

from benchmarks.delay_proxy import DelayModel, DelayProxy
from pan.util import eventloop

STREAM = "LAT"
TS0 = 10_629_342_490_369_879  # ps, DEBS-like event time


async def stdin_lines() -> Any:
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            return
        yield orjson.loads(line)


async def sidecar(config: dict[str, Any]) -> None:
    proxies = [
        DelayProxy(("127.0.0.1", int(route["port"])), (route["host"], int(route["port"])), DelayModel(seed=n))
        for n, route in enumerate(config["routes"])
    ]
    for proxy in proxies:
        await proxy.start()
    print(orjson.dumps({"ready": len(proxies)}).decode(), flush=True)
    try:
        async for message in stdin_lines():
            for n, proxy in enumerate(proxies):
                # One seed per link, derived from the run's seed: reproducible and independent.
                proxy.set_model(DelayModel(**{**message, "seed": int(message.get("seed", 0)) * 1000 + n}))
            print(orjson.dumps({"ok": True}).decode(), flush=True)
    finally:
        for proxy in proxies:
            await proxy.stop()


async def sender(config: dict[str, Any]) -> None:
    rate = float(config["rate"])
    _reader, writer = await asyncio.open_connection(config["host"], int(config["port"]))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(orjson.dumps({"ready": True}).decode(), flush=True)
    started, sent = time.perf_counter(), 0
    while not stop.is_set():
        due = int(rate * (time.perf_counter() - started)) - sent
        if due > 0:
            now = time.time_ns()
            ts = TS0 + int((time.perf_counter() - started) * 1e12)
            writer.write(b"".join(
                orjson.dumps({"stream": STREAM, "ts": ts + k, "sent_ns": now}) + b"\n" for k in range(due)
            ))
            await writer.drain()
            sent += due
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.005):
                await stop.wait()
    writer.close()


async def probe(config: dict[str, Any]) -> None:
    """Subscribers with fixed paths; per phase, delays of tuples sent inside its window."""
    import aiohttp

    from pan.input.subscriber import StreamSubscriber

    received: dict[str, list[tuple[int, int]]] = {path: [] for path in config["paths"]}  # (sent_ns, recv_ns)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    subs = {
        path: StreamSubscriber(
            STREAM, config["repository"], start="latest", reset="latest", max_wait_ms=1000,
            norep=bool(spec.get("norep")), exclude=tuple(spec.get("exclude", ())), session=session,
        )
        for path, spec in config["paths"].items()
    }

    async def pull(path: str, sub: StreamSubscriber) -> None:
        async for batch in sub.batches():
            now = time.time_ns()
            received[path].extend((t["sent_ns"], now) for t in batch)

    tasks = [asyncio.create_task(pull(path, sub)) for path, sub in subs.items()]
    print(orjson.dumps({"ready": True}).decode(), flush=True)
    try:
        async for phase in stdin_lines():
            t0, t1 = int(phase["t0_ns"]), int(phase["t1_ns"])
            await asyncio.sleep(max(0.0, (t1 - time.time_ns()) / 1e9 + float(phase["settle_s"])))
            report: dict[str, Any] = {"phase": phase["name"], "paths": {}}
            for path, rows in received.items():
                delays = [(recv - sent) / 1e6 for sent, recv in rows if t0 <= sent < t1]
                sub = subs[path]
                report["paths"][path] = {
                    "delays_ms": delays,
                    "missed_total": sub.stats.missed,
                    "failovers_total": sub.stats.failovers,
                    "source": sub.source.endpoint if sub.source else None,
                }
                received[path] = [r for r in rows if r[0] >= t1]
            print(orjson.dumps(report).decode(), flush=True)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await session.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    modes = {"sidecar": sidecar, "sender": sender, "probe": probe}
    eventloop.run(modes[argv[0]](orjson.loads(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
