"""Unpaced `pan simulate` throughput into one real forwarder process, and the simulator's CPU.

Writes a synthetic split folder (42 sensors at DEBS rates), starts `pan run`
with one forwarder, replays with `pan simulate --speedup 0`, and waits until
the forwarder has counted every row.  Usage:

    .venv/bin/python benchmarks/simulate_bench.py [--rows 500000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pan.lifeline import shared_lifeline  # noqa: E402
from pan.web import free_port  # noqa: E402
from simulator.debs import HALF1  # noqa: E402

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
asyncio.run(main())
"""


def forwarder_rows(port: int) -> int:
    """Rows the forwarder counted so far, or -1 while it is too busy to answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/streams", timeout=30) as response:
            return int(json.loads(response.read())["component"]["rows"])
    except TimeoutError:
        return -1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--sink", choices=["forwarder", "discard"], default="forwarder",
                        help="discard: a byte sink instead of PAN, to see the simulator's own ceiling")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "split"
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
        wf_path = Path(tmp) / "wf.json"
        wf_path.write_text(json.dumps(workflow))
        command = [sys.executable, "-m", "pan", "run", str(wf_path)]
        if args.sink == "discard":
            ingest_port = workflow["workers"][0]["params"]["ingest_port"]
            command = [sys.executable, "-c", DISCARD, str(ingest_port), str(http_port)]
        runtime = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   **shared_lifeline().spawn_options())  # dies with us, even on SIGKILL
        try:
            for _ in range(100):
                try:
                    forwarder_rows(http_port)
                    break
                except (OSError, ValueError, KeyError):
                    time.sleep(0.1)
            started = time.perf_counter()
            sim = psutil.Popen([sys.executable, "-m", "pan", "simulate", "--workflow", str(wf_path), "--data",
                                str(folder), "--speedup", "0", "--quiet"], cwd=ROOT, stdout=subprocess.PIPE,
                              **shared_lifeline().spawn_options())
            cpu = None
            while sim.poll() is None:
                try:
                    times = sim.cpu_times()
                    cpu = times.user + times.system
                except psutil.Error:
                    pass
                time.sleep(0.05)
            sim_wall = time.perf_counter() - started
            summary = json.loads(sim.stdout.read())
            while forwarder_rows(http_port) < total and time.perf_counter() - started < 300:
                time.sleep(0.05)
            all_in = time.perf_counter() - started
            received = forwarder_rows(http_port)
        finally:
            runtime.terminate()
            runtime.wait(15)
    print(json.dumps({
        "sink": args.sink, "rows": total, "sent": summary["sent"], "received_by_forwarder": received,
        "simulator_rate_rows_per_s": summary["rate_rows_per_s"],
        "end_to_end_rows_per_s": round(total / all_in),
        "simulator_process_wall_s": round(sim_wall, 2),
        "simulator_cpu_s": round(cpu or 0, 2),
        "simulator_cpu_share": round((cpu or 0) / sim_wall, 2),
    }, indent=2))


if __name__ == "__main__":
    main()
