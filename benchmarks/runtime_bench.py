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
import os
import time
from typing import Any

from benchmarks import common
from benchmarks.runtime_latency import (
    LATENCY_P50_TARGET_MS,
    bench_latency_in_process,
    bench_latency_remote,
    bench_loopback_floor,
)
from benchmarks.runtime_memory import MEMORY_STREAMS, MEMORY_TUPLES, bench_memory
from benchmarks.runtime_report import render_section
from benchmarks.runtime_throughput import THROUGHPUT_TARGET, bench_throughput
from benchmarks.runtime_workload import LATENCY_STREAM, PAGE, THROUGHPUT_STREAM, WorkerProcess
from pan.util import eventloop

HELP = "throughput, long-poll latency and memory of one worker (issue 2)"
SECTION_NAME = "runtime-bench"


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
