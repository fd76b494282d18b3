"""Latency of `pan bench runtime`: append to receipt over a long poll, and the machine's loopback floor."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson

from benchmarks import common
from benchmarks.common import percentile
from benchmarks.runtime_worker import HOST, forwarder_spec
from benchmarks.runtime_workload import LATENCY_STREAM, LONG_POLL_MS, PAGE, START_TS, TS_STEP, WorkerProcess

if TYPE_CHECKING:  # imported where used: `pan` imports every benchmark module on start
    import aiohttp

LATENCY_P50_TARGET_MS = 2.0
WARMUP_SAMPLES = 20


async def raw_long_poll(
    session: aiohttp.ClientSession, worker_port: int, stream: str, after: int
) -> AsyncIterator[list[dict[str, Any]]]:
    base = f"http://{HOST}:{worker_port}/data?s={stream}&n={PAGE}&w={LONG_POLL_MS}&i="
    position = after
    while True:
        async with session.get(base + str(position)) as response:
            body = await response.read()
        tuples = orjson.loads(body)["tuples"]
        if tuples:
            position = tuples[-1]["i"]
            yield tuples


async def subscriber_long_poll(repository_port: int, stream: str, after: int) -> AsyncIterator[list[dict[str, Any]]]:
    from pan.input.subscriber import StreamSubscriber

    async with StreamSubscriber(
        stream, (HOST, repository_port), start=after, page_size=PAGE, max_wait_ms=LONG_POLL_MS
    ) as subscriber:
        async for batch in subscriber.batches():
            yield batch


class LatencyProbe:
    """Sends numbered rows at a fixed interval and times their arrival at a receiver."""

    ts = START_TS

    def __init__(self, samples: int, interval_s: float) -> None:
        self.samples = samples
        self.interval_s = interval_s

    def row(self, run: int, seq: int) -> dict[str, Any]:
        LatencyProbe.ts += TS_STEP
        return {"stream": LATENCY_STREAM, "ts": LatencyProbe.ts, "run": run, "seq": seq, "sent_ns": time.time_ns()}

    async def run(
        self, run_id: int, send: Callable[[dict[str, Any]], Awaitable[None]], receiver: AsyncIterator[list[dict]]
    ) -> list[float]:
        latencies_ms: dict[int, float] = {}
        complete = asyncio.Event()

        async def receive() -> None:
            async for batch in receiver:
                now = time.time_ns()
                for item in batch:
                    if item.get("run") == run_id:
                        latencies_ms[item["seq"]] = (now - item["sent_ns"]) / 1e6
                if len(latencies_ms) >= self.samples:
                    complete.set()
                    return

        task = asyncio.create_task(receive())
        try:
            await asyncio.sleep(0.2)  # the receiver parks in its first long poll
            for seq in range(self.samples):
                await send(self.row(run_id, seq))
                await asyncio.sleep(self.interval_s)
            await asyncio.wait_for(complete.wait(), 10)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            with contextlib.suppress(Exception):
                await receiver.aclose()  # type: ignore[attr-defined]
        return [latencies_ms[seq] for seq in sorted(latencies_ms) if seq >= WARMUP_SAMPLES]


def summarize_latency(per_run: list[list[float]]) -> dict[str, Any]:
    pooled = [x for run in per_run for x in run]
    p50 = percentile(pooled, 0.5)
    return {
        "samples": len(pooled),
        "p50_ms": round(p50, 3),
        "p90_ms": round(percentile(pooled, 0.9), 3),
        "p99_ms": round(percentile(pooled, 0.99), 3),
        "max_ms": round(max(pooled), 3),
        "runs_p50_ms": [round(percentile(run, 0.5), 3) for run in per_run],
        "runs_p99_ms": [round(percentile(run, 0.99), 3) for run in per_run],
        "ratio_p50_vs_target": round(p50 / LATENCY_P50_TARGET_MS, 3),
    }


async def last_index(session: aiohttp.ClientSession, worker_port: int, stream: str) -> int:
    async with session.get(f"http://{HOST}:{worker_port}/data?s={stream}&l=1") as response:
        return int(orjson.loads(await response.read())["last"])


async def bench_latency_remote(proc: WorkerProcess, samples: int, reps: int, interval_s: float) -> dict[str, Any]:
    import aiohttp

    probe = LatencyProbe(samples, interval_s)
    runs: dict[str, list[list[float]]] = {"raw_http": [], "stream_subscriber": []}
    _reader, writer = await asyncio.open_connection(HOST, proc.info["ingest_port"])

    async def send(row: dict[str, Any]) -> None:
        writer.write(orjson.dumps(row) + b"\n")
        await writer.drain()

    try:
        async with aiohttp.ClientSession() as session:
            port = proc.info["worker_port"]
            run_id = 0
            for _ in range(reps):
                for mode in runs:
                    run_id += 1
                    after = await last_index(session, port, LATENCY_STREAM)
                    if mode == "raw_http":
                        receiver = raw_long_poll(session, port, LATENCY_STREAM, after)
                    else:
                        receiver = subscriber_long_poll(proc.info["repository_port"], LATENCY_STREAM, after)
                    runs[mode].append(await probe.run(run_id, send, receiver))
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    return {mode: summarize_latency(per_run) for mode, per_run in runs.items()}


async def bench_latency_in_process(samples: int, interval_s: float) -> dict[str, Any]:
    """Worker and client on this event loop; rows are appended to the output stream directly."""
    import aiohttp

    from pan.config.specs import RepositorySpec
    from pan.repository.server import RepositoryServer
    from pan.worker.worker import Worker

    repository = RepositoryServer(HOST, 0)
    await repository.start()
    spec = forwarder_spec("bench-in-process", [LATENCY_STREAM], 100_000)
    worker = Worker(spec, RepositorySpec(HOST, repository.port))
    await worker.start()
    output = worker.outputs[LATENCY_STREAM]
    probe = LatencyProbe(samples, interval_s)

    async def append(row: dict[str, Any]) -> None:
        row = dict(row)
        del row["stream"]
        output.append(row)

    results: dict[str, Any] = {}
    try:
        async with aiohttp.ClientSession() as session:
            after = output.buffer.last
            raw = await probe.run(1001, append, raw_long_poll(session, worker.server.port, LATENCY_STREAM, after))
            results["raw_http"] = summarize_latency([raw])
            after = output.buffer.last
            sub = await probe.run(1002, append, subscriber_long_poll(repository.port, LATENCY_STREAM, after))
            results["stream_subscriber"] = summarize_latency([sub])
    finally:
        await worker.stop()
        await repository.stop()
    return results


async def bench_loopback_floor(samples: int, interval_s: float) -> dict[str, Any]:
    """Round trip of one byte to an asyncio echo server in another process, paced like the latency probe.

    Append-to-receipt over a worker process needs two cross-process wake-ups
    (sender -> worker, worker -> client), as does this round trip; it is the
    floor the machine itself imposes.
    """
    code = (
        "import asyncio\n"
        "async def echo(r, w):\n"
        "    while data := await r.read(64):\n"
        "        w.write(data)\n"
        "async def main():\n"
        "    server = await asyncio.start_server(echo, '127.0.0.1', 0)\n"
        "    print(server.sockets[0].getsockname()[1], flush=True)\n"
        "    await asyncio.Event().wait()\n"
        "from pan.util.eventloop import run\nrun(main())\n"
    )
    rtts: list[float] = []
    async with common.Child([sys.executable, "-c", code]) as echo:
        reader, writer = await asyncio.open_connection(HOST, int(echo.ready_line))
        try:
            for _ in range(samples):
                started = time.perf_counter_ns()
                writer.write(b"x")
                await writer.drain()
                await reader.read(64)
                rtts.append((time.perf_counter_ns() - started) / 1e6)
                await asyncio.sleep(interval_s)
        finally:
            writer.close()
    rtts = rtts[WARMUP_SAMPLES:]
    return {
        "samples": len(rtts),
        "p50_ms": round(percentile(rtts, 0.5), 3),
        "p90_ms": round(percentile(rtts, 0.9), 3),
        "p99_ms": round(percentile(rtts, 0.99), 3),
        "max_ms": round(max(rtts), 3),
    }
