"""Throughput of `pan bench runtime`: paging through a worker's backlog, raw and with a `StreamSubscriber`.

``rate_summary`` is shared with `pan bench wire` and `pan bench security`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson

from benchmarks.runtime_worker import HOST
from benchmarks.runtime_workload import (
    LONG_POLL_MS,
    PAGE,
    THROUGHPUT_STREAM,
    WorkerProcess,
    cpu_seconds,
    fill,
    sensor_lines,
    sensor_tails,
)

if TYPE_CHECKING:  # imported where used: `pan` imports every benchmark module on start
    import aiohttp

THROUGHPUT_TARGET = 200_000  # tuples/s


async def fetch_raw(session: aiohttp.ClientSession, worker_port: int, stream: str, total: int) -> int:
    """Page through the backlog with plain GETs; returns the number of tuples parsed."""
    base = f"http://{HOST}:{worker_port}/data?s={stream}&n={PAGE}&i="
    position, received = -1, 0
    while received < total:
        async with session.get(base + str(position)) as response:
            body = await response.read()
        tuples = orjson.loads(body)["tuples"]
        if not tuples:
            raise RuntimeError(f"backlog ended after {received} tuples")
        received += len(tuples)
        position = tuples[-1]["i"]
    return received


async def fetch_subscriber(repository_port: int, stream: str, total: int) -> int:
    from pan.input.subscriber import StreamSubscriber

    received = 0
    async with StreamSubscriber(
        stream, (HOST, repository_port), start="earliest", page_size=PAGE, max_wait_ms=LONG_POLL_MS
    ) as subscriber:
        async for batch in subscriber.batches():
            received += len(batch)
            if received >= total:
                break
        if subscriber.stats.missed or subscriber.stats.failovers:
            raise RuntimeError(f"subscriber saw gaps or failovers: {subscriber.stats}")
    return received


async def bench_throughput(proc: WorkerProcess, backlog: int, reps: int) -> dict[str, Any]:
    import aiohttp
    import psutil

    server = psutil.Process(proc.pid)
    me = psutil.Process()
    results: dict[str, Any] = {}
    async with aiohttp.ClientSession() as session:
        tails = sensor_tails(backlog)
        sid = int(THROUGHPUT_STREAM.removeprefix("SENSOR"))
        fill_s = await fill(session, proc, sensor_lines(sid, tails), {THROUGHPUT_STREAM: backlog - 1}, 120)
        page_url = f"http://{HOST}:{proc.info['worker_port']}/data?s={THROUGHPUT_STREAM}&n={PAGE}"
        async with session.get(page_url) as response:
            page_bytes = len(await response.read())
        results["backlog_tuples"] = backlog
        results["page_bytes"] = page_bytes
        results["ingest_fill_rows_per_s"] = round(backlog / fill_s)

        async def raw() -> int:
            return await fetch_raw(session, proc.info["worker_port"], THROUGHPUT_STREAM, backlog)

        async def sub() -> int:
            return await fetch_subscriber(proc.info["repository_port"], THROUGHPUT_STREAM, backlog)

        modes: dict[str, Callable[[], Awaitable[int]]] = {"raw_http": raw, "stream_subscriber": sub}
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in modes}
        await raw()  # warm-up: connections, code paths
        for _ in range(reps):
            for name, run in modes.items():  # interleaved, so drifting noise hits both alike
                server_cpu, my_cpu = cpu_seconds(server), cpu_seconds(me)
                started = time.perf_counter()
                count = await run()
                elapsed = time.perf_counter() - started
                server_cpu, my_cpu = cpu_seconds(server) - server_cpu, cpu_seconds(me) - my_cpu
                runs[name].append(
                    {
                        "tuples_per_s": count / elapsed,
                        "server_cpu": server_cpu / elapsed,
                        "client_cpu": my_cpu / elapsed,
                        "tuples_per_cpu_s": count / max(server_cpu + my_cpu, 1e-9),
                    }
                )
        for name, samples in runs.items():
            results[name] = {
                **rate_summary(samples),
                "median_tuples_per_cpu_s": round(statistics.median(s["tuples_per_cpu_s"] for s in samples)),
                "ratio_vs_target": round(statistics.median(s["tuples_per_s"] for s in samples) / THROUGHPUT_TARGET, 2),
            }
    return results


def rate_summary(samples: list[dict[str, float]]) -> dict[str, Any]:
    """Median, min, max and every run of ``tuples_per_s``, with the median CPU use of worker and client."""
    rates = [s["tuples_per_s"] for s in samples]
    return {
        "median_tuples_per_s": round(statistics.median(rates)),
        "min_tuples_per_s": round(min(rates)),
        "max_tuples_per_s": round(max(rates)),
        "runs_tuples_per_s": [round(r) for r in rates],
        "server_cpu_util": round(statistics.median(s["server_cpu"] for s in samples), 2),
        "client_cpu_util": round(statistics.median(s["client_cpu"] for s in samples), 2),
    }
