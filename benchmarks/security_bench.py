"""Benchmark of what closing a workflow costs (issue 14): the read token and TLS on one worker's `/data`.

Usage::

    pan bench security [--quick] [--reps N] [--write docs/benchmarks.md]

Four forwarder workers, each in its own OS process with its own repository
(benchmarks/runtime_worker.py), hold the same backlog of DEBS sensor tuples:
an open one, one with a workflow secret (every `/data` needs the read token),
one serving HTTPS, and one with both. One ``StreamSubscriber`` in this
process reads each whole backlog, the four in turn in every repetition so
drifting load hits all alike. Reported: tuples/s (median, min-max) and the
ratio to the open worker in the same run, with the load average. Beside it,
the per-request cost of signing a registration and of checking a signature
and a token (`pan/security/auth.py`), in microseconds, median of ``--reps`` timings.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import common, wire_bench
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

HELP = "tuples/s of one subscriber reading an open, a token-guarded, an HTTPS and a token+HTTPS worker (issue 14)"
SECTION_NAME = "security-bench"
SECTION_TITLE = "## The cost of a closed workflow: read token and TLS (issue 14)"
SECRET = "pan bench security: a secret of enough bytes"
VARIANTS = ("open", "token", "tls", "token+tls")
PAGE = 10_000


def variant_config(variant: str, backlog: int, tls: dict[str, str]) -> dict[str, Any]:
    config: dict[str, Any] = {"streams": [THROUGHPUT_STREAM], "buffer_size": backlog}
    if "token" in variant:
        config["secret"] = SECRET
    if "tls" in variant:
        config["tls"] = tls
    return config


async def read_backlog(proc: WorkerProcess, variant: str, total: int, ca: Path) -> int:
    """Tuples read by a fresh subscriber, with what the variant needs, from the start of the backlog to its end."""
    from pan.security.auth import Credentials
    from pan.security.tls import client_context

    return await wire_bench.read_backlog(
        proc.info["repository_port"], "json", PAGE, total,
        token=Credentials(SECRET.encode()).read_token if "token" in variant else None,
        tls=client_context(ca) if "tls" in variant else None,
    )


async def fill_worker(proc: WorkerProcess, variant: str, backlog: int, ca: Path) -> None:
    import aiohttp

    from pan.security.auth import Credentials, bearer
    from pan.security.tls import client_context

    request: dict[str, Any] = {}
    if "token" in variant:
        request["headers"] = bearer(Credentials(SECRET.encode()).read_token)
    if "tls" in variant:
        request.update(ssl=client_context(ca), scheme="https")
    sid = int(THROUGHPUT_STREAM.removeprefix("SENSOR"))
    async with aiohttp.ClientSession() as session:
        await fill(session, proc, sensor_lines(sid, sensor_tails(backlog)), {THROUGHPUT_STREAM: backlog - 1}, 300,
                   **request)


def signing_costs(reps: int, count: int = 2000) -> dict[str, float]:
    """Microseconds per call: sign a registration, check it (a fresh one each time), check a read token."""
    from pan.security.auth import Credentials, Gate, bearer

    credentials = Credentials(SECRET.encode())
    body = b'{"s":["SENSOR4","SENSOR8"],"h":"198.18.0.2","p":51001,"rep":false,"lvl":0,"ttl":6000}'
    token = bearer(credentials.read_token)
    samples: dict[str, list[float]] = {"sign": [], "check_signature": [], "check_token": []}
    for _ in range(reps):
        gate = Gate(credentials, signed_paths=frozenset({"/publish"}))
        started = time.perf_counter()
        signed = [credentials.signed_headers("POST", "/publish", None, body, now_ms=int(time.time() * 1000) + n)
                  for n in range(count)]
        samples["sign"].append((time.perf_counter() - started) / count * 1e6)
        started = time.perf_counter()
        for headers in signed:
            gate.check("POST", "/publish", [], body, headers)
        samples["check_signature"].append((time.perf_counter() - started) / count * 1e6)
        started = time.perf_counter()
        for _ in range(count):
            gate.check("GET", "/data", [("s", "SENSOR4")], b"", token)
        samples["check_token"].append((time.perf_counter() - started) / count * 1e6)
    return {name: round(statistics.median(values), 2) for name, values in samples.items()}


async def bench(procs: dict[str, WorkerProcess], backlog: int, reps: int, ca: Path) -> dict[str, Any]:
    import psutil

    me = psutil.Process()
    for variant, proc in procs.items():
        await fill_worker(proc, variant, backlog, ca)
        await read_backlog(proc, variant, min(backlog, 5 * PAGE), ca)  # warm-up: connections, handshakes, code paths
    runs: dict[str, list[dict[str, float]]] = {variant: [] for variant in procs}
    for _ in range(reps):
        for variant, proc in procs.items():
            server = psutil.Process(proc.pid)
            server_cpu, my_cpu = cpu_seconds(server), cpu_seconds(me)
            started = time.perf_counter()
            count = await read_backlog(proc, variant, backlog, ca)
            elapsed = time.perf_counter() - started
            runs[variant].append({"tuples_per_s": count / elapsed,
                                  "server_cpu": (cpu_seconds(server) - server_cpu) / elapsed,
                                  "client_cpu": (cpu_seconds(me) - my_cpu) / elapsed})
    summary: dict[str, Any] = {variant: rate_summary(samples) for variant, samples in runs.items()}
    base = summary["open"]["median_tuples_per_s"]
    for variant in procs:
        summary[variant]["ratio_to_open"] = round(summary[variant]["median_tuples_per_s"] / base, 3)
    return summary


def render_section(summary: dict[str, Any]) -> str:
    rows = []
    for variant in VARIANTS:
        r = summary["variants"][variant]
        rows.append([variant, f"{r['median_tuples_per_s']:,}", f"{r['min_tuples_per_s']:,}-{r['max_tuples_per_s']:,}",
                     f"{r['ratio_to_open']:.3f}", f"{r['server_cpu_util']:.2f}", f"{r['client_cpu_util']:.2f}"])
    costs = summary["auth_us"]
    config = summary["config"]
    return "\n".join([
        *common.report_head(SECTION_TITLE, summary), "",
        f"Command: `{summary['command']}`. One forwarder worker per variant (own process and repository), each "
        f"holding {config['backlog']:,} DEBS sensor tuples; one subscriber reads each backlog in pages of "
        f"{PAGE:,} JSON tuples, the variants in turn, {config['reps']} times.", "",
        common.markdown_table(["variant", "tuples/s (median)", "min-max", "÷ open", "worker CPU", "client CPU"],
                              rows),
        "",
        f"Per request (median of {config['reps']} timings of 2,000 calls): signing a registration "
        f"{costs['sign']} µs, checking its signature {costs['check_signature']} µs, checking a read token "
        f"{costs['check_token']} µs. Workers sign one registration per refresh period (2 s by default).", "",
    ])


async def run_all(args: argparse.Namespace) -> dict[str, Any]:
    from pan.security.tls import make_certificates

    reps = args.reps or (3 if args.quick else 5)
    if reps < 1:
        raise SystemExit("pan bench security: --reps must be >= 1")
    backlog = 50_000 if args.quick else 200_000
    summary = common.run_header("PAN closed workflow: token and TLS (issue 14)")
    summary["config"] = {"quick": args.quick, "reps": reps, "backlog": backlog}
    with tempfile.TemporaryDirectory(prefix="pan-bench-security-") as tmp:
        files = make_certificates(Path(tmp), [HOST])
        tls = {"ca": str(files.ca), "cert": files.cert, "key": files.key}
        procs: dict[str, WorkerProcess] = {}
        try:
            for variant in VARIANTS:
                procs[variant] = await WorkerProcess(variant_config(variant, backlog, tls)).start()
            summary["variants"] = await bench(procs, backlog, reps, files.ca)
        finally:
            for proc in procs.values():
                await proc.stop()
    summary["auth_us"] = signing_costs(reps)
    summary["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return summary


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="a smaller backlog and 3 repetitions")
    p.add_argument("--reps", type=int, help="repetitions per variant (default 5, quick 3)")
    p.add_argument("--write", metavar="PATH", help="write/update the security section of this Markdown file")


def run(args: argparse.Namespace) -> int:
    from pan.util import eventloop

    try:
        import cryptography  # noqa: F401
    except ImportError:
        print("pan bench security: needs the tls extra to make its certificates (pip install 'pan[tls]')",
              file=sys.stderr)
        return 2
    try:
        summary = eventloop.run(run_all(args))
    finally:
        common.kill_leftovers()
    common.publish(summary, args.write, SECTION_NAME, lambda: render_section(summary))
    return 0
