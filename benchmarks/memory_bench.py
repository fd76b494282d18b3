"""Benchmark of a forwarder's memory per buffered tuple: column buffers against JSON tuples (issue 13).

Usage::

    pan bench memory [--quick] [--reps N] [--write docs/benchmarks.md]

A forwarder in its own OS process (benchmarks/runtime_worker.py) with 100
sensor streams of capacity 10,000 is filled through its ingest port in
rounds, as `pan bench runtime` fills it, and its RSS sampled after each round.
Its streams hold their rows as numbers (``column_buffers``, the default,
pan/buffers/column_ring.py) or one JSON encoding per tuple; the two alternate,
``--reps`` runs each. Reported per kind: the RSS growth per buffered tuple
(median, min-max), the RSS when full, and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from benchmarks import common
from benchmarks.runtime_memory import MEMORY_STREAMS, MEMORY_TUPLES, bench_memory
from pan.buffers.column_ring import hot_rows_for
from pan.util import eventloop

HELP = "memory per buffered tuple of a forwarder: column buffers against JSON tuples (issue 13)"
SECTION = "memory-bench"
KINDS = {"columns": True, "json": False}
TARGET_BYTES = 120


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="a quarter of the tuples per stream")
    p.add_argument("--tuples", type=int, help=f"tuples per stream (default {MEMORY_TUPLES:,}, its capacity)")
    p.add_argument("--reps", type=int, default=5, help="runs per kind of buffer, alternating (default 5)")
    p.add_argument("--write", metavar="PATH", help="write/update the memory section of this Markdown file")


def run(args: argparse.Namespace) -> int:
    per_stream = args.tuples or (MEMORY_TUPLES // 4 if args.quick else MEMORY_TUPLES)
    if args.reps < 1 or not 5 <= per_stream <= MEMORY_TUPLES:
        print(f"pan bench memory: --reps must be >= 1 and --tuples in 5..{MEMORY_TUPLES}", file=sys.stderr)
        return 2
    results: dict[str, Any] = {
        **common.run_header("memory"),
        "config": {"streams": MEMORY_STREAMS, "tuples_per_stream": per_stream, "capacity": MEMORY_TUPLES,
                   "reps": args.reps},
        "runs": {kind: [] for kind in KINDS},
    }
    for rep in range(args.reps):
        order = list(KINDS) if rep % 2 == 0 else list(reversed(KINDS))
        for kind in order:
            run_result = eventloop.run(bench_memory(MEMORY_STREAMS, per_stream, MEMORY_TUPLES, 5, KINDS[kind]))
            results["runs"][kind].append(run_result)
            print(f"{kind} rep {rep + 1}: {run_result['bytes_per_buffered_tuple']} bytes/tuple", file=sys.stderr)
    results["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    common.publish(results, args.write, SECTION, lambda: report(results))
    return 0


def summary(runs: list[dict[str, Any]], key: str) -> tuple[float, float, float]:
    values = [r[key] for r in runs]
    return common.median(values), min(values), max(values)


def report(results: dict[str, Any]) -> str:
    config = results["config"]
    rows = []
    medians = {}
    for kind, runs in results["runs"].items():
        per_tuple = summary(runs, "bytes_per_buffered_tuple")
        full = summary(runs, "filled_worker_rss_mb")
        medians[kind] = per_tuple[0]
        rows.append([f"`{kind}`" + (" (default)" if KINDS[kind] else ""), len(runs),
                     f"{per_tuple[0]:,.0f}", f"{per_tuple[1]:,.0f} - {per_tuple[2]:,.0f}",
                     f"{full[0]:,.1f}", f"{summary(runs, 'worker_empty_buffers_rss_mb')[0]:,.1f}",
                     "met" if per_tuple[0] <= TARGET_BYTES else "**missed**"])
    held = results["runs"]["columns"][0]["buffered_tuples"]
    table = common.markdown_table(
        ["Buffers", "Runs", "RSS bytes per buffered tuple (median)", "Min - max", f"RSS MB with {held:,} tuples",
         "RSS MB, buffers empty", f"Target {TARGET_BYTES} bytes"], rows, "l" + "r" * 5 + "l")
    return "\n".join([
        *common.report_head("## Memory per buffered tuple: column buffers against JSON tuples (issue 13)", results),
        "",
        f"Command: `{results['command']}`. A forwarder process with {config['streams']} sensor streams of capacity "
        f"{config['capacity']:,}, filled with {config['tuples_per_stream']:,} DEBS rows each through its ingest port "
        "in 5 rounds; RSS growth per tuple = (RSS when full - RSS before filling) / tuples held. The kinds "
        "alternate. `columns`: each stream holds its rows as numbers (`ts` in 64 bits, the other 12 values in "
        "32 while they fit, `pan/buffers/column_ring.py`) and the JSON of its newest "
        f"{hot_rows_for(config['capacity']):,} "
        "tuples (a sixteenth of its capacity); `json`: one JSON "
        "encoding per tuple (`column_buffers: false`).",
        "",
        table,
        "",
        f"Columns against JSON: **{medians['columns'] / medians['json']:.2f}x** the memory per buffered tuple.",
    ]) + "\n"
