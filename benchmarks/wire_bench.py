"""Benchmark of the `/data` wire formats (issue 13): JSON pages, Arrow IPC pages and line pages.

Usage::

    pan bench wire [--quick] [--reps N] [--pages 1000,10000] [--write docs/benchmarks.md]

One forwarder worker in its own OS process (benchmarks/runtime_worker.py)
holds a backlog of DEBS sensor tuples (13 integers each, as `pan bench
runtime` uses); one ``StreamSubscriber`` in this process reads the whole
backlog with ``wire="json"``, with ``wire="arrow"`` and as encoded tuples
(``encoded=True``: line pages, pan/wire/line_pages.py, each tuple left as bytes),
in turn in each repetition so drifting load hits all alike. Reported per page
size and format: tuples/s (median, min-max), the CPU of the worker and of the
client per second of the run, and each format's ratio to JSON of the medians,
with the load average at start and end.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from itertools import product
from typing import TYPE_CHECKING, Any

from benchmarks import common
from benchmarks.runtime_throughput import rate_summary
from benchmarks.runtime_worker import HOST
from benchmarks.runtime_workload import (
    THROUGHPUT_STREAM,
    WorkerProcess,
    cpu_seconds,
    fill,
    sensor_lines,
    sensor_tails,
)

if TYPE_CHECKING:  # imported where used: `pan` imports every benchmark module on start
    import aiohttp

HELP = "tuples/s of one subscriber reading JSON, Arrow and line /data pages from one worker (issue 13)"
SECTION_NAME = "wire-bench"
SECTION_TITLE = "## Wire formats: JSON, Arrow and line pages (issue 13)"
#: ``lines``: a reader of encoded tuples (line pages); ``columns``: of record batches (Arrow pages); the others
#: decode every tuple into a dict.
WIRES = ("json", "arrow", "lines", "columns")


async def read_backlog(repository_port: int, wire: str, page: int, total: int, **options: Any) -> int:
    """Tuples read by a fresh subscriber from the start of the backlog to its end (``options``: more of
    ``StreamSubscriber``'s, e.g. a token and TLS)."""
    from pan.input.subscriber import StreamSubscriber

    received = 0
    async with StreamSubscriber(
        THROUGHPUT_STREAM, (HOST, repository_port), start="earliest", page_size=page, max_wait_ms=1000,
        wire={"lines": "json", "columns": "arrow"}.get(wire, wire), encoded=wire == "lines", columns=wire == "columns",
        **options,  # type: ignore[arg-type]
    ) as subscriber:
        async for batch in subscriber.batches():
            received += len(batch)
            if received >= total:
                break
        if subscriber.stats.missed or subscriber.stats.failovers or subscriber.stats.decode_errors:
            raise RuntimeError(f"{wire}: the subscriber saw gaps, failovers or bad pages: {subscriber.stats}")
    return received


async def page_bytes(session: aiohttp.ClientSession, worker_port: int, page: int) -> dict[str, int]:
    """Bytes of the first page of the backlog in each format (a page is also capped at 1 MiB of JSON)."""
    from pan.input.fetcher import ACCEPT
    from pan.wire import line_pages

    accept = {**ACCEPT, "lines": line_pages.ACCEPT, "columns": ACCEPT["arrow"]}
    sizes = {}
    for wire in WIRES:
        async with session.get(f"http://{HOST}:{worker_port}/data", params={"s": THROUGHPUT_STREAM, "n": str(page)},
                               headers={"Accept": accept[wire]}) as response:
            sizes[wire] = len(await response.read())
    return sizes


async def bench(procs: dict[str, WorkerProcess], backlog: int, pages: list[int], reps: int) -> dict[str, Any]:
    """Per kind of buffer (``procs``: a worker each) and page size: each format's rates; reps interleave
    over kinds and formats."""
    import aiohttp
    import psutil

    me = psutil.Process()
    sizes: dict[str, dict[str, Any]] = {}
    async with aiohttp.ClientSession() as session:
        sid = int(THROUGHPUT_STREAM.removeprefix("SENSOR"))
        for kind, proc in procs.items():
            await fill(session, proc, sensor_lines(sid, sensor_tails(backlog)), {THROUGHPUT_STREAM: backlog - 1}, 300)
            sizes[kind] = {str(page): await page_bytes(session, proc.info["worker_port"], page) for page in pages}
    results: dict[str, Any] = {kind: {} for kind in procs}
    for page in pages:
        runs = {kind: {wire: [] for wire in WIRES} for kind in procs}
        for proc in procs.values():
            for wire in WIRES:  # warm-up: connections, imports, code paths
                await read_backlog(proc.info["repository_port"], wire, page, min(backlog, 5 * page))
        for _ in range(reps):
            for kind, proc in procs.items():
                server = psutil.Process(proc.pid)
                for wire in WIRES:
                    server_cpu, my_cpu = cpu_seconds(server), cpu_seconds(me)
                    started = time.perf_counter()
                    count = await read_backlog(proc.info["repository_port"], wire, page, backlog)
                    elapsed = time.perf_counter() - started
                    runs[kind][wire].append({
                        "tuples_per_s": count / elapsed,
                        "server_cpu": (cpu_seconds(server) - server_cpu) / elapsed,
                        "client_cpu": (cpu_seconds(me) - my_cpu) / elapsed,
                    })
        for kind in procs:
            per_wire: dict[str, Any] = {wire: rate_summary(samples) for wire, samples in runs[kind].items()}
            per_wire["ratio_over_json"] = {
                wire: round(per_wire[wire]["median_tuples_per_s"] / per_wire["json"]["median_tuples_per_s"], 2)
                for wire in WIRES if wire != "json"
            }
            per_wire["page_bytes"] = sizes[kind][str(page)]
            results[kind][str(page)] = per_wire
    return results


def render_section(summary: dict[str, Any]) -> str:
    rows = []
    for (kind, by_page), page in product(summary["buffers"].items(), summary["config"]["pages"]):
        per_wire = by_page[str(page)]
        for wire in WIRES:
            r = per_wire[wire]
            rows.append([
                kind, page, wire, f"{r['median_tuples_per_s']:,}",
                f"{r['min_tuples_per_s']:,}-{r['max_tuples_per_s']:,}",
                f"{r['server_cpu_util']:.2f}", f"{r['client_cpu_util']:.2f}",
                f"{per_wire['ratio_over_json'][wire]:.2f}" if wire != "json" else "",
                f"{per_wire['page_bytes'][wire]:,}",
            ])
    table = common.markdown_table(
        ["buffers", "page (n)", "format", "tuples/s (median)", "min-max", "worker CPU", "client CPU", "vs JSON",
         "page bytes"], rows, "ll" + "r" * 7
    )
    config = summary["config"]
    return "\n".join([
        *common.report_head(SECTION_TITLE, summary), "",
        f"Command: `{summary['command']}`. A backlog of {config['backlog']:,} DEBS sensor tuples, read "
        f"{config['reps']} times per format and page size, formats alternating, from a forwarder that holds it in "
        "column buffers (`columns`, the default: Arrow pages are made from its rows) and from one that holds JSON "
        "tuples (`json`, `column_buffers: false`: an Arrow page is its JSON page decoded and transposed), their "
        "runs interleaved too. Readers: `json` and `arrow` build a dict per tuple, `lines` keeps each tuple's "
        "bytes (line pages), `columns` keeps each Arrow page as a record batch (`StreamSubscriber(columns=True)`).",
        "", table, "",
    ])


async def run_all(args: argparse.Namespace) -> dict[str, Any]:
    reps = args.reps or (3 if args.quick else 5)
    if reps < 1:
        raise SystemExit("pan bench wire: --reps must be >= 1")
    backlog = 50_000 if args.quick else 200_000
    try:
        pages = [int(p) for p in args.pages.split(",")]
    except ValueError:
        raise SystemExit(f"pan bench wire: --pages must be integers separated by commas, got {args.pages!r}") from None
    if not pages or any(not 1 <= p <= 100_000 for p in pages):
        raise SystemExit("pan bench wire: every page size must be in 1..100000")
    summary = common.run_header("PAN wire formats (issue 13)")
    summary["config"] = {"quick": args.quick, "reps": reps, "backlog": backlog, "pages": pages}
    config = {"streams": [THROUGHPUT_STREAM], "buffer_size": backlog}
    async with (
        WorkerProcess({**config, "column_buffers": True}) as columns,
        WorkerProcess({**config, "column_buffers": False}) as plain,
    ):
        summary["buffers"] = await bench({"columns": columns, "json": plain}, backlog, pages, reps)
    summary["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return summary


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="a smaller backlog and 3 repetitions")
    p.add_argument("--reps", type=int, help="repetitions per format and page size (default 5, quick 3)")
    p.add_argument("--pages", default="1000,10000", help="page sizes (n), comma-separated (default 1000,10000)")
    p.add_argument("--write", metavar="PATH", help="write/update the wire section of this Markdown file")


def run(args: argparse.Namespace) -> int:
    from pan.util import eventloop
    from pan.wire import arrow_pages

    if not arrow_pages.available():
        print("pan bench wire: needs pyarrow (pip install 'pan[arrow]')", file=sys.stderr)
        return 2
    try:
        summary = eventloop.run(run_all(args))
    finally:
        common.kill_leftovers()
    common.publish(summary, args.write, SECTION_NAME, lambda: render_section(summary))
    return 0
