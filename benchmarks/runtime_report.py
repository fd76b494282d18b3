"""The Markdown section of `pan bench runtime` (between the ``runtime-bench`` markers)."""

from __future__ import annotations

from typing import Any

from benchmarks.runtime_latency import LATENCY_P50_TARGET_MS, WARMUP_SAMPLES
from benchmarks.runtime_memory import MEMORY_TUPLES
from benchmarks.runtime_throughput import THROUGHPUT_TARGET
from benchmarks.runtime_workload import PAGE

SECTION_TITLE = "## Runtime (issue 2)"


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
