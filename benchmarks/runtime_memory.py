"""Memory of `pan bench runtime`: RSS of a forwarder worker as its output buffers fill (also `pan bench memory`)."""

from __future__ import annotations

import asyncio
from typing import Any

from benchmarks.runtime_worker import HOST
from benchmarks.runtime_workload import WorkerProcess, fill, sensor_tails

MEMORY_STREAMS = 100
MEMORY_TUPLES = 10_000


def rss_mb(pid: int) -> float:
    import psutil

    return round(psutil.Process(pid).memory_info().rss / 2**20, 1)


async def settle_rss(pid: int, seconds: float = 0.5) -> float:
    await asyncio.sleep(seconds)
    return rss_mb(pid)


async def bench_memory(
    streams: int, per_stream: int, capacity: int, steps: int, column_buffers: bool = True
) -> dict[str, Any]:
    """RSS of an empty worker, then of one with ``streams`` outputs filled in ``steps`` rounds (``column_buffers``:
    the forwarder's, pan/buffers/column_ring.py).

    Every round adds ``per_stream / steps`` tuples to every stream and samples
    the RSS.  If the next round would push the worker beyond half of the memory
    available now, filling stops and the per-tuple growth is extrapolated (so
    the benchmark cannot starve a shared machine).
    """
    import aiohttp
    import psutil

    from pan.repository.server import RepositoryServer

    names = [f"SENSOR{sid}" for sid in range(1, streams + 1)]
    results: dict[str, Any] = {"streams": streams, "tuples_per_stream": per_stream, "capacity": capacity,
                               "column_buffers": column_buffers}
    repository = RepositoryServer(HOST, 0)  # served by this process's loop, not counted in the worker's RSS
    await repository.start()
    try:
        base = {"buffer_size": capacity, "repository_port": repository.port}
        async with WorkerProcess({"name": "bench-empty", "streams": [], **base}) as empty:
            results["empty_worker_rss_mb"] = await settle_rss(empty.pid)
        cap_mb = psutil.virtual_memory().available / 2**20 / 2
        config = {"name": "bench-memory", "streams": names, "column_buffers": column_buffers, **base}
        async with WorkerProcess(config) as proc:
            before = await settle_rss(proc.pid)
            results["worker_empty_buffers_rss_mb"] = before
            tails = sensor_tails(per_stream, seed=7)
            per_step = -(-per_stream // steps)
            curve: list[tuple[int, float]] = [(0, before)]
            fill_s = 0.0
            async with aiohttp.ClientSession() as session:
                for start in range(0, per_stream, per_step):
                    stop = min(start + per_step, per_stream)
                    if len(curve) > 1:
                        growth_per_round = (curve[-1][1] - curve[0][1]) / (len(curve) - 1)
                        if curve[-1][1] + 1.5 * growth_per_round > cap_mb:
                            break
                    lines: list[bytes] = []
                    for tail in tails[start:stop]:  # interleaved by time, as sensors report
                        lines.extend(b"%d%s" % (sid, tail) for sid in range(1, streams + 1))
                    fill_s += await fill(session, proc, lines, dict.fromkeys(names, stop - 1), 300)
                    curve.append((stop * streams, await settle_rss(proc.pid, 0.2)))
            held, rss = curve[-1]
            per_tuple = (rss - before) * 2**20 / held
            results["buffered_tuples"] = held
            results["filled_worker_rss_mb"] = rss
            results["complete"] = held == streams * per_stream
            results["projected_full_rss_mb"] = round(before + per_tuple * streams * MEMORY_TUPLES / 2**20, 1)
            results["bytes_per_buffered_tuple"] = round(per_tuple)
            results["ingest_fill_rows_per_s"] = round(held / fill_s)
            results["rss_curve_mb"] = [[n, r] for n, r in curve]
    finally:
        await repository.stop()
    return results
