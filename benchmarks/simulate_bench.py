"""Unpaced `pan simulate` throughput into one real forwarder process, and the simulator's CPU.

Writes a synthetic split folder (42 sensors at DEBS rates), starts `pan run`
with one forwarder, replays with `pan simulate --speedup 0`, and waits until
the forwarder has counted every row.  Usage:

    pan bench simulate [--rows 500000] [--sink forwarder|discard] [--reps N] [--write docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks import common
from pan.util import eventloop
from simulator.debs import HALF1

HELP = "unpaced `pan simulate` throughput into one forwarder process (or a byte sink), and the simulator's CPU"
SECTION = "simulate-bench"
SIMULATE_TIMEOUT_S = 600.0

BALLS = [4, 8, 10, 12]
OTHERS = [13, 14, 97, 98, 47, 16, 49, 88, 19, 52, 53, 54, 23, 24, 57, 58, 59, 28, 61, 62, 99, 100, 63, 64,
          65, 66, 67, 68, 69, 38, 71, 40, 73, 74, 75, 44, 105, 106]


def write_folder(folder: Path, rows: int) -> int:
    per_second = 2000 * len(BALLS) + 200 * len(OTHERS)
    seconds = rows / per_second
    total = 0
    for sid in BALLS + OTHERS:
        hz = 2000 if sid in BALLS else 200
        period = 10**12 // hz
        n = int(seconds * hz)
        start = HALF1[0] + sid
        lines = [f"{sid},{start + k * period},{k % 52000},{k % 60000 - 30000},100,5000000,60000,10000,0,0,0,10000,0\n"
                 for k in range(n)]
        (folder / f"SENSOR{sid}.csv").write_text("".join(lines))
        total += n
    return total


# A TCP sink counting newlines, with a /streams-like HTTP answer so the benchmark loop stays the same.
DISCARD = """
import asyncio, json, sys
rows = 0
async def sink(reader, writer):
    global rows
    while data := await reader.read(1 << 20):
        rows += data.count(b"\\n")
async def http(reader, writer):
    await reader.readline()
    body = json.dumps({"component": {"rows": rows}}).encode()
    writer.write(b"HTTP/1.0 200 OK\\r\\nContent-Length: %d\\r\\n\\r\\n" % len(body) + body)
    await writer.drain()
    writer.close()
async def main():
    await asyncio.start_server(sink, "127.0.0.1", int(sys.argv[1]))
    await asyncio.start_server(http, "127.0.0.1", int(sys.argv[2]))
    await asyncio.Event().wait()
from pan.util.eventloop import run
run(main())
"""


def forwarder_rows(port: int) -> int:
    """Rows the forwarder counted so far, or -1 while it is too busy to answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/streams", timeout=30) as response:
            return int(json.loads(response.read())["component"]["rows"])
    except TimeoutError:
        return -1


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rows", type=int, default=500_000)
    p.add_argument("--sink", choices=["forwarder", "discard"], default="forwarder",
                   help="discard: a byte sink instead of PAN, to see the simulator's own ceiling")
    p.add_argument("--reps", type=int, default=1, help="replays of the same folder; the report shows medians")
    p.add_argument("--write", metavar="PATH", help="update this Markdown report (e.g. docs/benchmarks.md)")


async def wait_answering(port: int, timeout_s: float = 30.0) -> None:
    """Until the forwarder (or the sink) answers its /streams."""
    async with asyncio.timeout(timeout_s):
        while True:
            try:
                await asyncio.to_thread(forwarder_rows, port)
                return
            except (OSError, ValueError, KeyError):
                await asyncio.sleep(0.1)


async def wait_rows(port: int, rows: int, timeout_s: float) -> None:
    """Until the forwarder has counted ``rows`` rows, or ``timeout_s`` has passed (the report shows how many)."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(0.0, timeout_s)):
            while await asyncio.to_thread(forwarder_rows, port) < rows:  # noqa: ASYNC110 (polled over HTTP)
                await asyncio.sleep(0.05)


async def replay_once(wf_path: Path, folder: Path, http_port: int, total: int, received_before: int) -> dict[str, Any]:
    """One unpaced `pan simulate` of the folder: its own summary, its CPU, and when the forwarder had every row."""
    import psutil

    started = time.perf_counter()
    sim = common.Child([sys.executable, "-m", "pan", "simulate", "--workflow", str(wf_path), "--data", str(folder),
                        "--speedup", "0", "--quiet"], ready=False)
    cpu = 0.0
    async with sim, asyncio.TaskGroup() as tasks:
        finished = tasks.create_task(sim.output(SIMULATE_TIMEOUT_S))
        process = psutil.Process(sim.pid)
        while not finished.done():
            try:
                times = process.cpu_times()
                cpu = times.user + times.system
            except psutil.Error:
                pass
            await asyncio.sleep(0.05)
    sim_wall = time.perf_counter() - started
    summary = json.loads(finished.result())
    await wait_rows(http_port, received_before + total, timeout_s=300 - sim_wall)
    all_in = time.perf_counter() - started
    return {"sent": summary["sent"], "received": await asyncio.to_thread(forwarder_rows, http_port) - received_before,
            "simulator_rate_rows_per_s": summary["rate_rows_per_s"], "end_to_end_rows_per_s": round(total / all_in),
            "simulator_process_wall_s": round(sim_wall, 2), "simulator_cpu_s": round(cpu, 2),
            "simulator_cpu_share": round(cpu / sim_wall, 2)}


async def measure(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from pan.http.addresses import free_port

    folder = tmp / "split"
    folder.mkdir()
    total = write_folder(folder, args.rows)
    streams = [f"SENSOR{s}" for s in BALLS + OTHERS]
    http_port = free_port()
    workflow = {
        "name": "bench", "repository": {"host": "127.0.0.1", "port": free_port()},
        "workers": [{"name": "F", "type": "forwarder", "host": "127.0.0.1", "port": http_port,
                     "buffer_size": 100_000,
                     "params": {"ingest_port": free_port(), "inter_pan_inputs": streams, "decoder": "debs_csv"}}],
    }
    wf_path = tmp / "wf.json"
    wf_path.write_text(json.dumps(workflow))
    command = [sys.executable, "-m", "pan", "run", str(wf_path)]
    if args.sink == "discard":
        command = [sys.executable, "-c", DISCARD, str(workflow["workers"][0]["params"]["ingest_port"]), str(http_port)]
    runs = []
    async with common.Child(command, ready=False, grace_s=15):
        await wait_answering(http_port)
        for _ in range(max(1, args.reps)):
            runs.append(await replay_once(wf_path, folder, http_port, total, await asyncio.to_thread(
                forwarder_rows, http_port)))
    medians = {key: common.median(r[key] for r in runs) for key in runs[0] if key.startswith("simulator_") or
               key == "end_to_end_rows_per_s"}
    return {**common.run_header("simulate"), "sink": args.sink, "rows": total, "reps": len(runs),
            "sent": runs[-1]["sent"], "received_by_forwarder": runs[-1]["received"], **medians, "runs": runs}


def run(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="pan-simulate-bench-") as tmp:
        try:
            results = eventloop.run(measure(args, Path(tmp)))
        finally:
            common.kill_leftovers()
    common.publish(results, args.write, SECTION, lambda: report(results))
    return 0


def report(results: dict[str, Any]) -> str:
    return "\n".join([
        *common.report_head("## Unpaced `pan simulate` into one forwarder", results),
        f"Command: `{results['command']}`: {results['rows']:,} rows of 42 sensors at DEBS rates into "
        f"{'one forwarder process (`pan run`)' if results['sink'] == 'forwarder' else 'a byte sink'}, "
        f"medians of {results['reps']} replays.",
        "",
        common.markdown_table(
            ["Rows", "Simulator rows/s", "End-to-end rows/s", "Simulator wall s", "Simulator CPU s", "CPU share"],
            [[common.fmt(results["rows"]), common.fmt(results["simulator_rate_rows_per_s"]),
              common.fmt(results["end_to_end_rows_per_s"]), f"{results['simulator_process_wall_s']:.2f}",
              f"{results['simulator_cpu_s']:.2f}", f"{results['simulator_cpu_share']:.2f}"]]),
    ])
