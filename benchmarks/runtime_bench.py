"""Benchmark of the PAN runtime (issue 2): throughput, long-poll latency, memory.

Usage::

    pan bench runtime [--quick] [--reps N] [--write docs/benchmarks.md]

What is measured (all over 127.0.0.1, ports picked by the OS):

* **Throughput**: one forwarder worker, running in its own OS process together
  with a repository, holds a backlog of DEBS sensor tuples in one output stream
  (filled through its TCP ingest port before the clock starts).  This process
  pages through the whole backlog with ``n=1000``:

  - *raw*: an aiohttp keep-alive loop over ``/data`` that parses every page
    with orjson;
  - *subscriber*: ``pan.input.subscriber.StreamSubscriber`` (repository lookup, position,
    duplicate/gap checks) iterated with ``batches()``.

  The CPU time both processes spent during each run is recorded as well, to
  show which side limits the rate.
* **Latency** (append to receipt, long poll ``w=1000``): a JSON row carrying
  ``sent_ns`` is written into the worker's ingest connection every few ms; the
  subscriber, parked in a long poll, computes ``receive_ns - sent_ns`` after
  parsing the answer.  Sender and receiver share this process and its clock.
  For contrast the same is measured with a worker inside this process whose
  output stream is appended to directly (same event loop as the client).
* **Memory**: RSS of a worker process with 100 output streams x 10,000
  buffered DEBS tuples, next to an empty worker and to the same worker before
  its buffers were filled.

It prints one JSON summary; ``--write PATH`` also replaces the section between
the ``runtime-bench`` markers in PATH (other sections are kept).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson

from benchmarks import common
from benchmarks.common import percentile
from benchmarks.runtime_worker import HOST, forwarder_spec
from pan.util import eventloop

if TYPE_CHECKING:  # imported where used: `pan` imports every benchmark module on start
    import aiohttp
    import psutil

HELP = "throughput, long-poll latency and memory of one worker (issue 2)"

THROUGHPUT_TARGET = 200_000  # tuples/s
LATENCY_P50_TARGET_MS = 2.0
PAGE = 1000  # n= of every throughput fetch
LONG_POLL_MS = 1000
MEMORY_STREAMS = 100
MEMORY_TUPLES = 10_000
THROUGHPUT_STREAM = "SENSOR4"
LATENCY_STREAM = "LAT"
WARMUP_SAMPLES = 20
START_TS = 10_629_342_490_369_879  # ps, the order of magnitude of the DEBS 2013 timestamps
TS_STEP = 5_000_000_000  # ps between two rows of one sensor (200 Hz)

SECTION_NAME = "runtime-bench"
SECTION_TITLE = "## Runtime (issue 2)"


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


# --- throughput --------------------------------------------------------------------------


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


# --- latency -----------------------------------------------------------------------------


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


# --- memory --------------------------------------------------------------------------------


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


# --- report ----------------------------------------------------------------------------------


def ok(flag: bool) -> str:
    return "yes" if flag else "**no**"


def render_section(summary: dict[str, Any]) -> str:
    m = summary["machine"]
    t = summary["throughput"]
    lr = summary["latency_worker_process"]
    li = summary.get("latency_in_process")
    mem = summary["memory"]
    reps = summary["config"]["reps"]
    clock = f" @ {m['cpu_freq_mhz']} MHz" if m.get("cpu_freq_mhz") else ""
    lines = [
        SECTION_TITLE,
        "",
        f"Measured {summary['date']} with `{summary['command']}`"
        f"{' (quick mode: smaller backlog, fewer samples)' if summary['config']['quick'] else ''}.",
        "",
        f"Machine: {m['cpu']}{clock}, {m['cores']} cores, {m['ram_gb']} GB RAM, Python {m['python']} "
        f"(aiohttp {m['aiohttp']}, orjson {m['orjson']}), {m['platform']}. "
        f"Load average at start: {', '.join(map(str, m['load_avg']))}, at the end: "
        f"{', '.join(map(str, summary['load_avg_at_end']))} "
        "(throughput is a median over repetitions and latency percentiles pool several runs, so that "
        "other jobs on the machine weigh less).",
        "",
        "Setup: a forwarder worker and a repository run in their own OS process; the client runs in the "
        "benchmark process; everything over 127.0.0.1.",
        "",
        "### Throughput (one worker to one subscriber, `n=1000` pages)",
        "",
        f"Backlog: {t['backlog_tuples']:,} DEBS sensor tuples in one output stream (13 integer fields, "
        f"ts ~1.06e16 ps), filled through the TCP ingest port beforehand; one page is {t['page_bytes']:,} bytes. "
        f"Median of {reps} runs, each reading the whole backlog; runs of the two clients alternate.",
        "",
        "| Client | Median tuples/s | Min-max | vs target 200,000 | Met | Server CPU | Client CPU "
        "| Tuples per CPU-second |",
        "|---|---:|---:|---:|:---:|---:|---:|---:|",
    ]
    clients = (("raw aiohttp loop + orjson", "raw_http"), ("`StreamSubscriber.batches()`", "stream_subscriber"))
    for label, key in clients:
        r = t[key]
        lines.append(
            f"| {label} | {r['median_tuples_per_s']:,} | {r['min_tuples_per_s']:,}-{r['max_tuples_per_s']:,} "
            f"| {r['ratio_vs_target']:.2f}x | {ok(r['median_tuples_per_s'] >= THROUGHPUT_TARGET)} "
            f"| {r['server_cpu_util']:.0%} | {r['client_cpu_util']:.0%} | {r['median_tuples_per_cpu_s']:,} |"
        )
    lines += [
        "",
        "CPU columns: CPU time of the worker process and of the client process during a run, divided by its "
        "wall time (100% = one core busy). One request is in flight at a time, so the two sides take turns and "
        "their sum stays below one core; a sum well below 100% means the processes waited for a CPU (the "
        "machine is shared). Tuples per CPU-second divides the tuples by the CPU time both processes spent: "
        "it is less sensitive to that noise and approximates the rate on an otherwise idle machine.",
        "",
        "### Latency (append to receipt, long poll `w=1000`)",
        "",
        f"One row every {summary['config']['latency_interval_ms']} ms; the first {WARMUP_SAMPLES} rows of each "
        "run are discarded as warm-up; percentiles over all remaining samples. Worker process: the row enters "
        "through the ingest TCP port (JSON line carrying its send time), so the figure includes ingest parsing. "
        "In process: worker and client share one event loop, the row is appended to the output stream directly.",
        "",
        "| Path | Client | Samples | p50 ms | p90 ms | p99 ms | max ms | p50 vs target 2 ms | Met |",
        "|---|---|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    groups = [("worker process, TCP ingest", lr)]
    if li:
        groups.append(("in process, direct append", li))
    for path, group in groups:
        for label, key in (("raw aiohttp", "raw_http"), ("`StreamSubscriber`", "stream_subscriber")):
            r = group[key]
            lines.append(
                f"| {path} | {label} | {r['samples']:,} | {r['p50_ms']:.3f} | {r['p90_ms']:.3f} | {r['p99_ms']:.3f} "
                f"| {r['max_ms']:.2f} | {r['ratio_p50_vs_target']:.2f}x | {ok(r['p50_ms'] < LATENCY_P50_TARGET_MS)} |"
            )
    floor = summary.get("latency_loopback_floor")
    if floor:
        lines.append(
            f"| floor: 1-byte TCP echo round trip to another process | plain asyncio | {floor['samples']:,} "
            f"| {floor['p50_ms']:.3f} | {floor['p90_ms']:.3f} | {floor['p99_ms']:.3f} | {floor['max_ms']:.2f} | | |"
        )
    lines += [
        "",
        "The floor row runs no PAN code: it shows what a round trip between two otherwise idle processes "
        "(two wake-ups, like ingest -> worker -> client) costs on this machine with the same pacing; "
        "it is the reference for the tail of the worker-process rows.",
        "",
        "### Memory (worker RSS)",
        "",
        "Worker processes alone (their repository runs in the benchmark process). The buffers are filled "
        "through the ingest port in rounds, with the RSS sampled after each round.",
        "",
        "| Worker | Buffered tuples | RSS MB |",
        "|---|---:|---:|",
        f"| empty forwarder (no streams) | 0 | {mem['empty_worker_rss_mb']} |",
        f"| forwarder with {mem['streams']} output streams, buffers empty (capacity {mem['capacity']:,}) "
        f"| 0 | {mem['worker_empty_buffers_rss_mb']} |",
    ]
    for held, rss in mem["rss_curve_mb"][1:]:
        lines.append(f"| same, filled through ingest | {held:,} | {rss} |")
    full = mem["streams"] * MEMORY_TUPLES
    if mem["buffered_tuples"] < full:
        lines.append(
            f"| projected for {mem['streams']} x {MEMORY_TUPLES:,} (linear in the tuples held) "
            f"| {full:,} | ~{mem['projected_full_rss_mb']:.0f} |"
        )
    lines += [
        "",
        f"Growth per buffered DEBS tuple: about {mem['bytes_per_buffered_tuple']:,} bytes of RSS ("
        + ("the forwarder's column buffers: 8 bytes for `ts` and 4 for each other value; `pan bench memory` compares "
           "them with JSON tuples" if mem.get("column_buffers", True) else "a tuple is held as its JSON encoding")
        + f"; ~{t['page_bytes'] // PAGE} bytes of JSON per tuple on the wire). Ingest rate while filling: "
        f"{mem['ingest_fill_rows_per_s']:,} CSV rows/s."
        + ("" if mem["complete"] else " Filling stopped early to stay below half of the free memory."),
        "",
        "No timing asserts live in the test suite; this benchmark only reports.",
    ]
    return "\n".join(lines) + "\n"


# --- main ------------------------------------------------------------------------------------


async def run_all(args: argparse.Namespace) -> dict[str, Any]:
    quick = args.quick
    reps = args.reps or (3 if quick else 7)
    backlog = 100_000 if quick else 200_000
    latency_samples = 250 if quick else 1000
    latency_reps = 1 if quick else 3
    memory_per_stream = 2_500 if quick else MEMORY_TUPLES
    interval_s = 0.005
    summary: dict[str, Any] = {
        "benchmark": "PAN runtime (issue 2)",
        "date": common.utc_now(),
        "command": common.command_line(),
        "machine": common.machine(),
        "config": {
            "quick": quick,
            "reps": reps,
            "throughput_backlog": backlog,
            "page": PAGE,
            "latency_samples_per_run": latency_samples,
            "latency_runs": latency_reps,
            "latency_interval_ms": interval_s * 1000,
            "memory_streams": MEMORY_STREAMS,
            "memory_tuples_per_stream": memory_per_stream,
        },
    }
    started = time.perf_counter()
    async with WorkerProcess({"streams": [THROUGHPUT_STREAM, LATENCY_STREAM], "buffer_size": 1_000_000}) as proc:
        summary["throughput"] = await bench_throughput(proc, backlog, reps)
        summary["latency_worker_process"] = await bench_latency_remote(proc, latency_samples, latency_reps, interval_s)
    summary["latency_in_process"] = await bench_latency_in_process(latency_samples, interval_s)
    summary["latency_loopback_floor"] = await bench_loopback_floor(latency_samples, interval_s)
    summary["memory"] = await bench_memory(
        MEMORY_STREAMS, memory_per_stream, MEMORY_TUPLES, steps=2 if quick else 5
    )
    t, lat = summary["throughput"], summary["latency_worker_process"]
    summary["targets"] = {
        "throughput_raw_met": t["raw_http"]["median_tuples_per_s"] >= THROUGHPUT_TARGET,
        "throughput_subscriber_met": t["stream_subscriber"]["median_tuples_per_s"] >= THROUGHPUT_TARGET,
        "latency_p50_raw_met": lat["raw_http"]["p50_ms"] < LATENCY_P50_TARGET_MS,
        "latency_p50_subscriber_met": lat["stream_subscriber"]["p50_ms"] < LATENCY_P50_TARGET_MS,
    }
    summary["duration_s"] = round(time.perf_counter() - started, 1)
    summary["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return summary


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="smaller backlog and fewer samples (< 40 s)")
    p.add_argument("--reps", type=int, help="throughput repetitions (default 7, quick 3)")
    p.add_argument("--write", metavar="PATH", help="write/update the runtime section of this Markdown file")


def run(args: argparse.Namespace) -> int:
    try:
        summary = eventloop.run(run_all(args))
    finally:
        common.kill_leftovers()
    common.publish(summary, args.write, SECTION_NAME, lambda: render_section(summary))
    return 0
