"""`pan bench redis`: the fan-out benchmark against Redis Streams, side by side with PAN.

Same payload (the JSON tuple PAN serves, as one field ``d``), same publish
rate, same client processes and counts, same page size (``XREAD COUNT``) and
long-poll wait (``BLOCK 1000``); Redis trims the stream to the PAN ring
buffer size (``MAXLEN ~``).  One producer XADDs (pipelined per 5 ms tick);
each consumer XREADs BLOCK from its last id.  ``redis-server`` (Debian
package) runs on loopback on a free port with persistence off, started and
stopped by the benchmark; for each client count the Redis and PAN points are
measured back to back in the same run, and the report gives PAN / Redis.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from benchmarks import common, fanout
from pan.util import eventloop

HELP = "the fan-out benchmark against Redis Streams (XADD / XREAD BLOCK), PAN / Redis in the same run"
SECTION = "redis-bench"
RATIO_TARGET = 0.5


def add_arguments(p: argparse.ArgumentParser) -> None:
    fanout.add_common_arguments(p)
    p.add_argument("--publishers", type=fanout.int_list, default=[1], help="PAN publishers to compare (default 1)")


class RedisServer:
    """redis-server on 127.0.0.1:free port, no persistence, as our child."""

    def __init__(self) -> None:
        self.child: common.Child | None = None
        self.port = 0

    async def start(self) -> fanout.System:
        from pan.http.addresses import free_port

        self.port = free_port()
        args = ["redis-server", "--bind", common.HOST, "--port", str(self.port), "--save", "", "--appendonly", "no",
                "--protected-mode", "yes", "--maxclients", "10000", "--loglevel", "warning"]
        self.child = common.Child(args, ready=False)
        await self.child.start()
        import redis.asyncio as aioredis

        client = aioredis.Redis(host=common.HOST, port=self.port)
        try:
            deadline = time.monotonic() + 15
            while True:
                try:
                    await client.ping()
                    break
                except (OSError, aioredis.ConnectionError):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"redis-server did not start: {self.child.stderr_tail()}") from None
                    await asyncio.sleep(0.1)
            version = (await client.info("server"))["redis_version"]
        finally:
            await client.aclose()
        config = {"kind": "redis", "host": common.HOST, "port": self.port}
        return fanout.System("redis", f"Redis {version}", dict(config), dict(config), [self.child.pid])

    async def reset_stream(self) -> None:
        import redis.asyncio as aioredis

        client = aioredis.Redis(host=common.HOST, port=self.port)
        try:
            await client.delete(fanout_stream())
        finally:
            await client.aclose()

    async def stop(self) -> None:
        if self.child is not None:
            await self.child.stop()
            self.child = None


def fanout_stream() -> str:
    from benchmarks.fanout_parts import STREAM

    return STREAM


async def run_redis(args: argparse.Namespace) -> dict[str, Any]:
    summary: dict[str, Any] = {
        **common.run_header("redis"),
        "config": {k: getattr(args, k) for k in ("clients", "publishers", "rate", "seconds", "warmup", "reps",
                                                  "client_procs", "buffer", "page", "quick")},
        "points": [],
    }
    redis = RedisServer()
    workdir = Path(tempfile.mkdtemp(prefix="pan-redis-"))  # the PAN systems' workflow files; removed at the end
    pans = [fanout.PanSystem(p, args.buffer, workdir) for p in args.publishers]
    try:
        redis_system = await redis.start()
        summary["redis_version"] = redis_system.label
        pan_systems = [await pan.start() for pan in pans]
        for n in args.clients:
            per_system: dict[str, list[dict[str, Any]]] = {}
            for _ in range(args.reps):  # interleaved, so drifting machine load hits both alike
                await redis.reset_stream()
                per_system.setdefault("redis", []).append(await fanout.measure(redis_system, n, args))
                for pan, system in zip(pans, pan_systems, strict=True):
                    per_system.setdefault(f"pan{pan.publishers}", []).append(await fanout.measure(system, n, args))
            point: dict[str, Any] = {"clients": n}
            for key, runs in per_system.items():
                point[key] = fanout.combine(runs)
            for pan in pans:
                mine, theirs = point[f"pan{pan.publishers}"], point["redis"]
                point[f"ratio_pan{pan.publishers}"] = ratios(mine, theirs)
            summary["points"].append(point)
            print(f"redis N={n}: Redis {theirs['delivered_per_s']:,.0f} tuples/s p99 {common.fmt(theirs['p99_ms'])} ms;"
                  f" PAN {mine['delivered_per_s']:,.0f} tuples/s p99 {common.fmt(mine['p99_ms'])} ms",
                  file=sys.stderr, flush=True)
    finally:
        for pan in pans:
            await pan.stop()
        await redis.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    summary["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    return summary


def ratios(pan: dict[str, Any], redis: dict[str, Any]) -> dict[str, Any]:
    def div(a: float | None, b: float | None) -> float | None:
        return round(a / b, 3) if a is not None and b else None

    delivered = div(pan["delivered_per_s"], redis["delivered_per_s"])
    return {
        "delivered": delivered,
        "p99": div(pan["p99_ms"], redis["p99_ms"]),
        "delivered_target_met": delivered is not None and delivered >= RATIO_TARGET,
    }


def render(summary: dict[str, Any]) -> str:
    cfg = summary["config"]
    rows = []
    for point in summary["points"]:
        r = point["redis"]
        for pub in cfg["publishers"]:
            p, ratio = point[f"pan{pub}"], point[f"ratio_pan{pub}"]
            rows.append([
                point["clients"], pub, common.fmt(p["delivered_per_s"]), common.fmt(r["delivered_per_s"]),
                f"**{ratio['delivered']:.2f}**" if ratio["delivered"] is not None else "-",
                common.fmt(p["p99_ms"]), common.fmt(r["p99_ms"]),
                f"{ratio['p99']:.2f}" if ratio["p99"] is not None else "-",
                f"{p['server_cpu']:.0%} / {r['server_cpu']:.0%}", f"{p['client_cpu']:.0%} / {r['client_cpu']:.0%}",
                f"{p['clients_without_tuples']} / {r['clients_without_tuples']}",
            ])
    met = [point[f"ratio_pan{pub}"]["delivered_target_met"] for point in summary["points"] for pub in cfg["publishers"]]
    lines = [
        "## PAN and Redis Streams, same fan-out (issue 6)",
        "",
        f"Measured {summary['date']} with `{summary['command']}`; {summary.get('redis_version', 'Redis')} from "
        "Debian, on loopback, `--save '' --appendonly no`.",
        "",
        common.machine_line(summary["machine"], summary["load_avg_at_end"])
        + f" **The machine was shared and loaded**; medians of {cfg['reps']} repetition(s), Redis and PAN "
        "alternating per client count.",
        "",
        f"Both get the same payload (the JSON tuple PAN serves; in Redis one field `d`) at {cfg['rate']:,.0f} "
        f"tuples/s from the same feeder loop; both are read by the same {cfg['client_procs']} client processes "
        f"(PAN: `StreamSubscriber` long polls n={cfg['page']} w=1000; Redis: redis-py asyncio `XREAD BLOCK 1000 "
        f"COUNT {cfg['page']}` from the last id; every tuple parsed with orjson in both). PAN ring buffer and Redis "
        f"`MAXLEN ~` are both {cfg['buffer']:,}. Window {cfg['seconds']} s after {cfg['warmup']} s warm-up. "
        "redis-py runs without hiredis (not a project dependency), i.e. with its pure-Python RESP parser. "
        "CPU = CPU-seconds per second of the servers (PAN: `pan run` and children; Redis: redis-server) and of "
        "the client processes; a client figure above 100% per process means its event loop was blocked past "
        "the window (the clients were overloaded).",
        "",
        common.markdown_table(
            ["Clients", "PAN publishers", "PAN tuples/s", "Redis tuples/s", "PAN ÷ Redis", "PAN p99 ms",
             "Redis p99 ms", "p99 PAN ÷ Redis", "Server CPU PAN / Redis", "Client CPU PAN / Redis",
             "Clients without tuples PAN / Redis"],
            rows,
        ),
        "",
        common.image_link(SECTION, "PAN vs Redis: delivered tuples/s and p99 delay vs clients"),
        "",
        f"Target PAN ≥ {RATIO_TARGET}x Redis in delivered tuples/s: met in {sum(met)} of {len(met)} points.",
        "",
        bottleneck_note(summary),
    ]
    return "\n".join(lines)


def bottleneck_note(summary: dict[str, Any]) -> str:
    """Which side limited Redis: redis-server's CPU next to the clients'."""
    server = [pt["redis"]["server_cpu"] for pt in summary["points"]]
    client = [pt["redis"]["client_cpu"] for pt in summary["points"]]
    if not server:
        return ""
    return (f"redis-server used {min(server):.0%}-{max(server):.0%} of a core while the Redis client processes "
            f"used {min(client):.0%}-{max(client):.0%}: the Redis figures are bound by the client side "
            "(redis-py with its pure-Python RESP parser), not by redis-server. Both systems share the same "
            "2 loaded cores, so neither "
            "ratio is a statement about the servers alone.")


def run(args: argparse.Namespace) -> int:
    fanout.apply_quick(args)
    problem = common.ensure_tool("redis-server", "redis-server")
    if problem:
        print(f"pan bench redis: skipped: {problem}", file=sys.stderr)
        print(orjson.dumps({"benchmark": "redis", "skipped": problem}).decode())
        return 0
    try:
        summary = eventloop.run(run_redis(args))
    finally:
        common.kill_leftovers()
    from benchmarks import plots

    common.publish(summary, args.write, SECTION, lambda: render(summary), lambda png: plots.redis(summary, png))
    return 0
