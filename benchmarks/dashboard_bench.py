"""`pan bench dashboard`: what browsers of `pan dashboard` cost it, and how late tuples reach them.

A generated match is replayed in real time into the 3-peer full-game workflow (the `pan replay` harness,
as `pan bench query-delay`), and `pan dashboard` runs beside it as a process of its own. The benchmark
opens WebSocket clients that want what the match page wants (every player, the referee, the ball,
possession, running, a heat map, shots), in phases of 1, 10 and 50 clients taken round robin, ``--reps``
times, each phase ``--phase-s`` long, so the three counts see the same stretch of the match and the same
machine load. Per phase:

* the dashboard process's CPU (user + system seconds per wall second, psutil);
* frames per second each client got (the server sends at most 25);
* the tuple-to-client delay of ``A1`` and ``BP_wholeGame_A``: when the first client received a tuple minus
  when the simulator sent the sensor row it answers (`benchmarks/query_delay.py`'s rule), next to the
  query delay of the same streams read straight from PAN by a subscriber in this process.

Clients count frames without decoding them, except the first, which decodes to time its tuples. Not
measured: a browser's own decoding and drawing (tuple-to-screen would need a browser per client).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from benchmarks import common
from benchmarks.query_delay import ROOT, SEND_LOG, delays, on_free_ports_copy, plain_split
from pan import eventloop
from pan.client import StreamSubscriber
from pan.web import free_port

HELP = "pan dashboard: its CPU with 1, 10 and 50 WebSocket clients, and tuple-to-client delay, in real time"
SECTION = "dashboard-bench"
COUNTS = (1, 10, 50)
TIMED = ("A1", "BP_wholeGame_A")
PLAYERS = [f"{team}{n}" for team in "AB" for n in range(1, 9)]
#: What the match page wants (pan_debs/workers/dashboard/static/dashboard.js, `wanted`), for the default choices.
WANTED = ["ACTIVEBALL", "REFEREE", "SHOTS", "HM_wholeGame_16x25_A2",
          *PLAYERS, *(f"BP_{p}" for p in PLAYERS), *(f"RUN_{p}" for p in PLAYERS),
          *(f"RUNAGG_wholeGame_{p}" for p in PLAYERS),
          *(f"BP_{w}_{t}" for w in ("1min", "5min", "10min", "20min", "wholeGame") for t in "AB")]
START_S = 60.0
MARGIN_S = 40.0  # match time beyond the phases: the workflow's and the dashboard's start


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reps", type=int, default=5, help="rounds of the 1/10/50-client phases (default 5)")
    p.add_argument("--phase-s", type=float, default=4.0, help="seconds per phase (default 4)")
    p.add_argument("--seed", type=int, default=2013)
    p.add_argument("--write", type=Path, help="update this markdown report (e.g. docs/benchmarks.md)")


@dataclass
class Phase:
    clients: int
    rep: int
    cpu_s: float = 0.0
    wall_s: float = 0.0
    frames: int = 0
    received: dict[str, list[tuple[int, int]]] = field(default_factory=lambda: {s: [] for s in TIMED})


@dataclass
class Clients:
    """WebSocket clients of the dashboard; the first decodes frames and notes when its timed tuples came."""

    url: str
    session: aiohttp.ClientSession
    phase: Phase | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    flowing: asyncio.Event = field(default_factory=asyncio.Event)  # the first client has had a player's position

    async def resize(self, count: int) -> None:
        while len(self.tasks) > count:
            task = self.tasks.pop()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        while len(self.tasks) < count:
            self.tasks.append(asyncio.create_task(self._client(first=not self.tasks)))

    async def _client(self, first: bool) -> None:
        try:
            await self._read(first)
        except Exception as exc:
            print(f"client failed: {exc!r}", file=sys.stderr, flush=True)
            raise

    async def _read(self, first: bool) -> None:
        async with self.session.ws_connect(self.url, timeout=aiohttp.ClientWSTimeout(ws_close=10)) as ws:
            await ws.send_str(orjson.dumps({"want": WANTED}).decode())
            async for message in ws:
                now = time.time_ns()
                phase = self.phase
                if phase is None:
                    if first and not self.flowing.is_set() and b'"A1"' in message.data:
                        self.flowing.set()
                    continue
                phase.frames += 1
                if first:
                    frame = orjson.loads(message.data)
                    for stream in TIMED:
                        for t in frame.get("streams", {}).get(stream, ()):
                            phase.received[stream].append((t["ts"], now))


async def direct(repository: str, stream: str, out: list[tuple[int, int]]) -> None:
    """The same stream straight from PAN: the query delay the dashboard adds to."""
    try:
        async with StreamSubscriber(stream, repository, start="latest") as subscriber:
            async for t in subscriber:
                out.append((t["ts"], time.time_ns()))
    except Exception as exc:
        print(f"direct reader of {stream} failed: {exc!r}", file=sys.stderr, flush=True)
        raise


async def phases(args: argparse.Namespace, workflow: Path, repository: str, done: list[Phase],
                 straight: dict[str, list[tuple[int, int]]]) -> None:
    import psutil

    port = free_port()
    dashboard = common.Child([sys.executable, "-m", "pan", "dashboard", "--workflow", str(workflow), "--port",
                              str(port)], startup_s=START_S)
    async with dashboard, aiohttp.ClientSession() as session:
        process = psutil.Process(dashboard.pid)
        readers = [asyncio.create_task(direct(repository, s, straight[s])) for s in TIMED]
        clients = Clients(f"http://127.0.0.1:{port}/ws", session)
        try:
            await clients.resize(1)
            async with asyncio.timeout(START_S):  # the match has begun: positions flow
                await clients.flowing.wait()
            for rep in range(args.reps):
                for count in COUNTS:
                    await clients.resize(count)
                    await asyncio.sleep(1.0)  # new clients get the newest values first: not a steady frame
                    phase = Phase(count, rep)
                    cpu, started = process.cpu_times(), time.monotonic()
                    clients.phase = phase
                    await asyncio.sleep(args.phase_s)
                    clients.phase = None
                    after = process.cpu_times()
                    phase.wall_s = time.monotonic() - started
                    phase.cpu_s = (after.user - cpu.user) + (after.system - cpu.system)
                    done.append(phase)
                    print(f"phase {rep + 1}/{args.reps}, {count} clients: {phase.frames} frames, "
                          f"{len(phase.received['A1'])} A1 tuples; directly {len(straight['A1'])} so far",
                          file=sys.stderr, flush=True)
        finally:
            await clients.resize(0)
            for task in readers:
                task.cancel()


async def measure(args: argparse.Namespace, work: Path, data: Path) -> tuple[list[Phase], dict[str, list[float]]]:
    from pan.workflow import load_workflow
    from pan_debs.simulator.replay import replay
    from pan_debs.simulator.simulate import SimulateOptions, simulate

    path = on_free_ports_copy(ROOT / "workflows" / "full_game_3_peers.json", work)
    workflow = load_workflow(path)
    options = SimulateOptions(workflow=workflow, data_dir=data, speedup=1.0, send_log=work / SEND_LOG,
                              skip_halftime=True)
    done: list[Phase] = []
    straight: dict[str, list[tuple[int, int]]] = {s: [] for s in TIMED}

    async def feed() -> Any:
        return (await simulate(options)).as_dict()

    await replay(path, workflow, feed, work / "record", only=["BP_wholeGame_B"],
                 observer=lambda: phases(args, path, workflow.repository.address, done, straight))
    return done, delays(work / SEND_LOG, straight)


def summarize(done: list[Phase], send_log: Path, straight: dict[str, list[float]]) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    for count in COUNTS:
        mine = [p for p in done if p.clients == count]
        cpu = [p.cpu_s / p.wall_s * 100 for p in mine]
        fps = [p.frames / p.wall_s / count for p in mine]
        received: dict[str, list[tuple[int, int]]] = {s: [] for s in TIMED}
        for p in mine:
            for s in TIMED:
                received[s] += p.received[s]
        late = delays(send_log, received)
        rows[str(count)] = {
            "phases": len(mine),
            "cpu_percent": {"median": common.median(cpu) if cpu else None, "min": min(cpu, default=None),
                            "max": max(cpu, default=None)},
            "frames_per_s_per_client": common.median(fps) if fps else None,
            "delay_ms": {s: common.summarize_ms(late[s]) for s in TIMED},
        }
    rows["pan_direct"] = {"delay_ms": {s: common.summarize_ms(straight[s]) for s in TIMED}}
    return rows


def run(args: argparse.Namespace) -> int:
    if args.reps < 1 or args.phase_s <= 0:
        print("pan bench dashboard: --reps must be >= 1 and --phase-s > 0", file=sys.stderr)
        return 2
    machine = common.machine()
    minutes = (len(COUNTS) * args.reps * (args.phase_s + 1.5) + MARGIN_S) / 60
    with tempfile.TemporaryDirectory(prefix="pan-dash-bench-") as tmp:
        work = Path(tmp)
        from pan_debs.simulator.realistic import generate

        generate(work / "game", minutes, args.seed)
        data = plain_split(work / "game", work / "split")
        done, straight = eventloop.run(measure(args, work, data))
        summary = {**common.run_header("dashboard"), "minutes": round(minutes, 2), "reps": args.reps,
                   "phase_s": args.phase_s, "clients": summarize(done, work / SEND_LOG, straight),
                   "load_at_end": list(os.getloadavg())}
    common.publish(summary, args.write, SECTION, lambda: report(summary, machine))
    return 0


def report(summary: dict[str, Any], machine: dict[str, Any]) -> str:
    rows = []
    for count in COUNTS:
        r = summary["clients"][str(count)]
        cpu = r["cpu_percent"]
        spread = f"{common.fmt(cpu['median'])} ({common.fmt(cpu['min'])}-{common.fmt(cpu['max'])})"
        rows.append([count, r["phases"], spread,
                     common.fmt(r["frames_per_s_per_client"]),
                     *(f"{common.fmt(r['delay_ms'][s]['p50_ms'])} / {common.fmt(r['delay_ms'][s]['p99_ms'])}"
                       for s in TIMED)])
    direct_row = summary["clients"]["pan_direct"]["delay_ms"]
    rows.append(["PAN directly", "-", "-", "-",
                 *(f"{common.fmt(direct_row[s]['p50_ms'])} / {common.fmt(direct_row[s]['p99_ms'])}" for s in TIMED)])
    table = common.markdown_table(["clients", "phases", "dashboard CPU % median (min-max)", "frames/s per client",
                                   *(f"`{s}` delay p50 / p99 ms" for s in TIMED)], rows)
    return "\n".join([
        "## pan dashboard: clients and delay (issue 16)",
        "",
        f"{common.utc_now()}. {common.machine_line(machine, summary['load_at_end'])}",
        f"Command: `{common.command_line()}`; {summary['minutes']} min generated match replayed in real time into "
        f"`full_game_3_peers.json`, `pan dashboard` beside it; {summary['reps']} rounds of 1, 10 and 50 WebSocket "
        f"clients, {summary['phase_s']:g} s each (module docstring of `benchmarks/dashboard_bench.py`).",
        "Delay = when the first client (or, last row, a subscriber reading PAN directly) received the tuple - "
        "when the simulator sent the sensor row it answers. The clients do not draw: no browser is in this loop.",
        "",
        table,
    ])
