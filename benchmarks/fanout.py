"""`pan bench fanout`: N concurrent long-poll subscribers on SENSOR105, 1..3 publishers.

Setup (all on 127.0.0.1): `pan run` starts a repository, one forwarder and
P-1 repeaters (level 1, each its own process); a feeder process writes DEBS
rows for SENSOR105 into the forwarder's ingest port at ``--rate`` tuples/s
with the send time as ``ts``; ``--client-procs`` processes run the N
subscribers (``pan.input.subscriber.StreamSubscriber``, start=latest, n=page, w=1000,
one shared aiohttp session per process), each of which picks a random
publisher through the repository.  After a warm-up, every client counts the
tuples it receives during the window and their delivery delay (receive time
minus ``ts``).

The harness (``measure``) is shared with `pan bench redis`, which runs the
same clients against Redis Streams.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from benchmarks import common
from pan.util import eventloop

HELP = "N long-poll subscribers on SENSOR105 fed at 15,000 tuples/s, with 1..3 publishers"
SECTION = "fanout-bench"
P99_TARGET_MS = 100.0
SCALE_TARGET = 2.5
PARTS = [sys.executable, "-m", "benchmarks.fanout_parts"]


def int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("values must be >= 1")
    return values


def add_common_arguments(p: argparse.ArgumentParser) -> None:
    """Options shared by `fanout` and `redis` (same clients, rate and payload)."""
    p.add_argument("--clients", type=int_list, default=[20, 100, 500, 1000], help="comma list")
    p.add_argument("--rate", type=float, default=15_000, help="published tuples/s (default 15000)")
    p.add_argument("--seconds", type=float, default=5.0, help="measurement window per point (default 5)")
    p.add_argument("--warmup", type=float, default=2.0, help="seconds between clients ready and the window")
    p.add_argument("--reps", type=int, default=1, help="repetitions per point; the report shows medians")
    p.add_argument("--client-procs", type=int, default=2, help="client processes sharing the subscribers")
    p.add_argument("--buffer", type=int, default=30_000, help="ring buffer / Redis MAXLEN (default 30000)")
    p.add_argument("--page", type=int, default=1000, help="tuples per fetch: PAN n=, Redis COUNT (default 1000)")
    p.add_argument("--quick", action="store_true", help="smoke mode: 4 clients, 1 s window, 500 tuples/s")
    p.add_argument("--write", metavar="PATH", help="update this Markdown report (plots go to its img/ folder)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_common_arguments(p)
    p.add_argument("--publishers", type=int_list, default=[1, 2, 3], help="comma list (default 1,2,3)")
    p.add_argument("--section", default=SECTION, help=f"report section and plot name prefix (default {SECTION})")


def apply_quick(args: argparse.Namespace) -> None:
    if args.quick:
        args.clients, args.rate, args.seconds, args.warmup, args.reps = [4], 500.0, 1.0, 0.5, 1
        if hasattr(args, "publishers"):
            args.publishers = [1]


# --- systems under test -----------------------------------------------------------------


@dataclass
class System:
    """What the clients and the feeder connect to, and whose CPU counts as server time."""

    kind: str  # "pan" or "redis"
    label: str
    client_config: dict[str, Any]
    feeder_config: dict[str, Any]
    server_pids: list[int] = field(default_factory=list)


class PanSystem:
    """`pan run` of a forwarder and P-1 repeaters, with its own repository, on free ports."""

    def __init__(self, publishers: int, buffer: int, workdir: Path) -> None:
        self.publishers = publishers
        self.buffer = buffer
        self.workdir = workdir
        self.child: common.Child | None = None
        self.repo_port = 0
        self.ingest_port = 0

    def workflow(self) -> dict[str, Any]:
        from pan.http.addresses import free_port

        self.repo_port, self.ingest_port = free_port(), free_port()
        workers: list[dict[str, Any]] = [
            {"name": "forwarder", "type": "forwarder", "host": common.HOST, "port": free_port(), "peer": "p0",
             "buffer_size": self.buffer,
             "params": {"ingest_port": self.ingest_port, "inter_pan_inputs": ["SENSOR105"], "decoder": "debs_csv"}}
        ]
        for k in range(1, self.publishers):
            workers.append(
                {"name": f"repeater{k}", "type": "repeater", "host": common.HOST, "port": free_port(),
                 "peer": f"p{k}", "inputs": ["SENSOR105"], "params": {"level": 1}, "buffer_size": self.buffer}
            )
        return {
            "name": f"fanout bench, {self.publishers} publisher(s)",
            "repository": {"host": common.HOST, "port": self.repo_port, "refresh_ms": 1000},
            "workers": workers,
        }

    async def start(self) -> System:
        path = self.workdir / f"fanout_p{self.publishers}.json"
        path.write_bytes(orjson.dumps(self.workflow()))
        self.child = common.Child([sys.executable, "-m", "pan", "run", str(path)], ready=False, grace_s=15)
        await self.child.start()
        await self._wait_published()
        import psutil

        pids = [self.child.pid, *(c.pid for c in psutil.Process(self.child.pid).children(recursive=True))]
        return System(
            "pan",
            f"PAN, {self.publishers} publisher(s)",
            {"kind": "pan", "repository": f"{common.HOST}:{self.repo_port}"},
            {"kind": "pan", "host": common.HOST, "port": self.ingest_port},
            pids,
        )

    async def _wait_published(self, timeout_s: float = 40.0) -> None:
        from pan.repository.client import PublishersMissing, RepositoryClient

        async with RepositoryClient((common.HOST, self.repo_port)) as repository:
            try:
                await repository.wait_for_publishers(["SENSOR105"], timeout_s, publishers=self.publishers)
            except PublishersMissing:
                tail = self.child.stderr_tail() if self.child else ""
                raise RuntimeError(f"PAN publishers did not register within {timeout_s} s: {tail}") from None

    async def stop(self) -> None:
        if self.child is not None:
            await self.child.stop()
            self.child = None


# --- one measurement --------------------------------------------------------------------


def cpu_of(pids: list[int]) -> float:
    import psutil

    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
    return total


def hist_percentile(hist: list[int], q: float) -> float | None:
    """Delay (ms) at quantile ``q`` of the pooled log histogram (bin's geometric centre)."""
    import numpy as np

    from benchmarks.fanout_parts import HIST_BINS, HIST_HI_US, HIST_LO_US

    counts = np.asarray(hist)
    total = counts.sum()
    if total == 0:
        return None
    edges = np.geomspace(HIST_LO_US, HIST_HI_US, HIST_BINS + 1)
    k = int(np.searchsorted(np.cumsum(counts), q * total))
    return float(np.sqrt(edges[k] * edges[k + 1]) / 1000)


async def measure(system: System, n: int, opts: argparse.Namespace) -> dict[str, Any]:
    """Feed, start n subscribers over the client processes, measure one window, stop all but the servers."""
    epoch_ns = time.time_ns()
    feed_config = {**system.feeder_config, "rate": opts.rate, "maxlen": opts.buffer, "epoch_ns": epoch_ns}
    feeder = common.Child([*PARTS, "feed", orjson.dumps(feed_config).decode()])
    clients: list[common.Child] = []
    try:
        await feeder.start()
        await asyncio.sleep(0.5)
        procs = max(1, min(opts.client_procs, n))
        shares = [n // procs + (1 if k < n % procs else 0) for k in range(procs)]
        base = {**system.client_config, "page": opts.page, "wait_ms": 1000, "startup_s": 90, "epoch_ns": epoch_ns}
        clients = [
            common.Child([*PARTS, "clients", orjson.dumps({**base, "n": share}).decode()], stdin=True, startup_s=120)
            for share in shares
        ]
        await asyncio.gather(*(c.start() for c in clients))
        t0 = time.time_ns() + int(opts.warmup * 1e9)
        t1 = t0 + int(opts.seconds * 1e9)
        window = orjson.dumps({"t0_ns": t0, "t1_ns": t1})
        await asyncio.gather(*(c.send(window) for c in clients))
        await asyncio.sleep(max(0.0, (t0 - time.time_ns()) / 1e9))
        server0, feeder0 = cpu_of(system.server_pids), cpu_of([feeder.pid])
        await asyncio.sleep(max(0.0, (t1 - time.time_ns()) / 1e9))
        server1, feeder1 = cpu_of(system.server_pids), cpu_of([feeder.pid])
        lines = await asyncio.gather(*(c.readline(60 + n / 20) for c in clients))
        results = []
        for child, line in zip(clients, lines, strict=True):
            if not line:
                raise RuntimeError(f"client process gave no result: {child.stderr_tail()}")
            results.append(orjson.loads(line))
        assert feeder.process is not None
        with contextlib.suppress(ProcessLookupError):
            feeder.process.send_signal(signal.SIGTERM)
        fed = orjson.loads(await feeder.readline(10) or b"{}")
    finally:
        await asyncio.gather(*(c.stop() for c in clients))
        await feeder.stop()
    return aggregate(system, n, opts, results, (server1 - server0), feeder1 - feeder0, fed)


def aggregate(
    system: System,
    n: int,
    opts: argparse.Namespace,
    results: list[dict[str, Any]],
    server_cpu_s: float,
    feeder_cpu_s: float,
    fed: dict[str, Any],
) -> dict[str, Any]:
    window = opts.seconds
    hist = [sum(col) for col in zip(*(r["hist"] for r in results), strict=True)]
    per_client = [pc for r in results for pc in r["per_client"]]
    p99s = sorted(pc[2] / 1000 for pc in per_client if pc[2] is not None)
    delivered = sum(r["delivered"] for r in results)
    published_rate = fed["sent"] / fed["seconds"] if fed.get("seconds") else opts.rate
    return {
        "system": system.kind,
        "label": system.label,
        "clients": n,
        "delivered": delivered,
        "delivered_per_s": round(delivered / window),
        "published_per_s": round(published_rate),
        "demand_fraction": round(delivered / (published_rate * window * n), 4) if published_rate else None,
        "p50_ms": hist_percentile(hist, 0.50),
        "p99_ms": hist_percentile(hist, 0.99),
        "client_p99_median_ms": common.median(p99s) if p99s else None,
        "client_p99_worst_ms": p99s[-1] if p99s else None,
        "clients_without_tuples": sum(1 for pc in per_client if pc[0] == 0),
        "missed": sum(r["missed"] for r in results),
        "errors": sum(r["errors"] for r in results),
        "crashed": [c for r in results for c in r["crashed"]],
        "server_cpu": round(server_cpu_s / window, 3),
        "client_cpu": round(sum(r["cpu_s"] for r in results) / window, 3),
        "feeder_cpu": round(feeder_cpu_s / window, 3),
    }


def combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median over repetitions of every number; the rest from the first run."""
    out = dict(runs[0])
    for key, value in runs[0].items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            values = [r[key] for r in runs if r.get(key) is not None]
            out[key] = common.median(values) if values else None
    out["reps"] = len(runs)
    out["delivered_per_s_all"] = [r["delivered_per_s"] for r in runs]
    return out


# --- the command ------------------------------------------------------------------------


async def run_fanout(args: argparse.Namespace) -> dict[str, Any]:
    summary: dict[str, Any] = {
        **common.run_header("fanout"),
        "section": args.section,
        "config": {k: getattr(args, k) for k in ("clients", "publishers", "rate", "seconds", "warmup", "reps",
                                                  "client_procs", "buffer", "page", "quick")},
        "points": [],
    }
    with tempfile.TemporaryDirectory(prefix="pan-fanout-") as tmp:
        for publishers in args.publishers:
            pan = PanSystem(publishers, args.buffer, Path(tmp))
            try:
                system = await pan.start()
                for n in args.clients:
                    runs = [await measure(system, n, args) for _ in range(args.reps)]
                    point = combine(runs)
                    point["publishers"] = publishers
                    summary["points"].append(point)
                    print(f"fanout P={publishers} N={n}: {point['delivered_per_s']:,.0f} tuples/s, "
                          f"p50 {common.fmt(point['p50_ms'])} ms, p99 {common.fmt(point['p99_ms'])} ms",
                          file=sys.stderr, flush=True)
            finally:
                await pan.stop()
    summary["load_avg_at_end"] = [round(x, 2) for x in __import__("os").getloadavg()]
    summary["targets"] = targets(summary["points"])
    return summary


def targets(points: list[dict[str, Any]]) -> dict[str, Any]:
    by = {(p["publishers"], p["clients"]): p for p in points}
    out: dict[str, Any] = {}
    if any(n >= 1000 for _, n in by):
        out["p99_under_100ms_at_1000"] = {
            f"P={pub}": (p["p99_ms"], p["p99_ms"] is not None and p["p99_ms"] < P99_TARGET_MS)
            for (pub, n), p in sorted(by.items()) if n == 1000
        }
    ratios = {}
    for (pub, n), p in sorted(by.items()):
        base = by.get((1, n))
        if pub == 3 and base and base["delivered_per_s"]:
            ratios[f"N={n}"] = round(p["delivered_per_s"] / base["delivered_per_s"], 2)
    if ratios:
        out["delivered_3_over_1"] = ratios
    return out


def render(summary: dict[str, Any]) -> str:
    cfg = summary["config"]
    rows = []
    for p in summary["points"]:
        rows.append([
            p["publishers"], p["clients"], common.fmt(p["delivered_per_s"]), f"{p['demand_fraction']:.1%}",
            common.fmt(p["p50_ms"]), common.fmt(p["p99_ms"]), common.fmt(p["client_p99_worst_ms"]),
            f"{p['server_cpu']:.0%}", f"{p['client_cpu']:.0%}", common.fmt(p["missed"]),
        ])
    t = summary["targets"]
    lines = [
        f"## Fan-out: N long-poll subscribers on SENSOR105 at {cfg['rate']:,.0f} tuples/s (issue 6)",
        "",
        f"Measured {summary['date']} with `{summary['command']}`.",
        "",
        common.machine_line(summary["machine"], summary["load_avg_at_end"])
        + " **The machine was shared with other jobs and loaded while this ran**; every figure is the median "
        f"of {cfg['reps']} repetition(s).",
        "",
        f"Setup: `pan run` starts a repository, a forwarder and P-1 level-1 repeaters, one process each; a feeder "
        f"process writes DEBS rows for SENSOR105 at {cfg['rate']:,.0f} tuples/s into the forwarder's ingest port "
        f"(the row's `ts` is its send time); {cfg['client_procs']} client processes run the N subscribers "
        f"(`StreamSubscriber`, start=latest, n={cfg['page']}, w=1000, one aiohttp session per process), each on "
        f"a publisher the repository picked at random. Ring buffers hold {cfg['buffer']:,} tuples. "
        f"Warm-up {cfg['warmup']} s, window {cfg['seconds']} s.",
        "",
        "Delay = receive time at the client - send time of the row, pooled over all tuples of all clients; "
        "worst p99 = the highest per-client p99. Demand = delivered ÷ (published x N): what share of the "
        "tuples every subscriber should have got arrived within the window. CPU = CPU-seconds per second "
        "(100% = one core) of the servers (`pan run` and its children) and of the client processes.",
        "",
        common.markdown_table(
            ["Publishers", "Clients", "Delivered tuples/s", "Demand met", "p50 ms", "p99 ms", "worst client p99",
             "Server CPU", "Client CPU", "Missed"],
            rows,
        ),
        "",
        common.image_link(summary["section"], "delivered tuples/s and p99 delay vs clients"),
        "",
        *target_lines(t),
        "",
        targets_note(summary["points"]),
    ]
    return "\n".join(lines)


def targets_note(points: list[dict[str, Any]]) -> str:
    """Say when the scaling target cannot show anything: one publisher already met the whole demand."""
    met = sorted(p["clients"] for p in points if p["publishers"] == 1 and (p["demand_fraction"] or 0) >= 0.95)
    if not met:
        return ""
    return (f"(At N={','.join(map(str, met))} one publisher already delivered >= 95% of the demand, so more "
            "publishers cannot raise the rate there; the scaling target is about saturated points.)")


def target_lines(t: dict[str, Any]) -> list[str]:
    lines = ["Targets of issue 6:", ""]
    for pub, (p99, met) in t.get("p99_under_100ms_at_1000", {}).items():
        lines.append(f"- 1000 subscribers, {pub}: p99 {common.fmt(p99)} ms (target < {P99_TARGET_MS:g} ms): "
                     f"{'met' if met else '**not met**'}")
    for n, ratio in t.get("delivered_3_over_1", {}).items():
        lines.append(f"- delivered tuples/s, 3 publishers / 1 publisher at {n}: {ratio:.2f}x "
                     f"(target >= {SCALE_TARGET}x): {'met' if ratio >= SCALE_TARGET else '**not met**'}")
    return lines if len(lines) > 2 else ["Targets of issue 6: not evaluated (points missing)."]


def plot(summary: dict[str, Any]) -> Callable[[Path], Any]:
    from benchmarks import plots

    return lambda png: plots.fanout(summary, png, P99_TARGET_MS)


def run(args: argparse.Namespace) -> int:
    apply_quick(args)
    try:
        summary = eventloop.run(run_fanout(args))
    finally:
        common.kill_leftovers()
    common.publish(summary, args.write, args.section, lambda: render(summary), plot(summary))
    return 0
