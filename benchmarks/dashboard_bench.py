"""`pan bench dashboard`: what browsers of `pan dashboard` cost it, and how late tuples reach a browser's screen.

A generated match is replayed in real time into the 3-peer full-game workflow (the `pan replay` harness,
as `pan bench query-delay`), and `pan dashboard` runs beside it as a process of its own. Viewers open the
match page in phases of 1, 10 and 50 viewers taken round robin, ``--reps`` times, each phase ``--phase-s``
long, so the three counts see the same stretch of the match and the same machine load. The viewers:

* up to ``--chromium`` (default 10) real headless Chromium instances (`benchmarks/chromium.py`), each a
  browser of its own, showing the page; the first is the timed one;
* beyond that (the 50-viewer phase), WebSocket clients in this process that want what the page wants and
  receive every frame, but neither decode nor draw it.

Per phase:

* the dashboard process's CPU (user + system seconds per wall second, psutil);
* match frames the timed browser drew per second;
* the tuple-to-screen delay of ``A1`` (a player's position on the pitch) and ``BP_wholeGame_A`` (the
  possession bar): the timed page is opened with ``?trace=A1,BP_wholeGame_A``, a debug hook of
  `workers/dashboard/static/dashboard.js` (off by default) that notes, for each drawn frame, the traced
  tuples it drew first and ``performance.timeOrigin + performance.now()`` when the drawing in that
  ``requestAnimationFrame`` ended. Delay = that time minus when the simulator sent the sensor row the tuple
  answers (`benchmarks/query_delay.py`'s rule: the send time of a row is when it entered the forwarder's
  socket). Browser and benchmark run on this machine, so both clocks are its wall clock. Next to it, the
  query delay of the same streams read straight from PAN by a subscriber in this process.

Not included: the compositor's last step from the drawn canvas to pixels (headless Chromium has no display).
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

from benchmarks import chromium, common
from benchmarks.query_delay import ROOT, SEND_LOG, delays, on_free_ports_copy, plain_split
from pan.http.addresses import free_port
from pan.input.subscriber import StreamSubscriber
from pan.util import eventloop

HELP = "pan dashboard: its CPU with 1, 10 and 50 browsers, and tuple-to-screen delay in Chromium, in real time"
SECTION = "dashboard-bench"
COUNTS = (1, 10, 50)
TIMED = ("A1", "BP_wholeGame_A")
PLAYERS = [f"{team}{n}" for team in "AB" for n in range(1, 9)]
#: What the match page wants (workers/dashboard/static/dashboard.js, `wanted`), for the default choices.
WANTED = ["ACTIVEBALL", "REFEREE", "SHOTS", "HM_wholeGame_16x25_A2", "$network", "$delays",
          *PLAYERS, *(f"BP_{p}" for p in PLAYERS), *(f"RUN_{p}" for p in PLAYERS),
          *(f"RUNAGG_wholeGame_{p}" for p in PLAYERS),
          *(f"BP_{w}_{t}" for w in ("1min", "5min", "10min", "20min", "wholeGame") for t in "AB")]
START_S = 120.0
SETTLE_S = 2.0  # after viewers join or leave: new viewers get the newest values first, not a steady frame
PER_CHROMIUM_S = 15.0  # match time one Chromium's start may take on a loaded machine
MARGIN_S = 60.0  # match time beyond the phases: the workflow's and the dashboard's start
COLLECT_S = 0.5  # how often the timed page's trace is collected


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reps", type=int, default=5, help="rounds of the 1/10/50-viewer phases (default 5)")
    p.add_argument("--phase-s", type=float, default=8.0, help="seconds per phase (default 8)")
    p.add_argument("--chromium", type=int, default=10, metavar="N",
                   help="real Chromium instances at most (default 10); the other viewers are WebSocket clients")
    p.add_argument("--seed", type=int, default=2013)
    p.add_argument("--write", type=Path, help="update this markdown report (e.g. docs/benchmarks.md)")


@dataclass
class Phase:
    viewers: int
    chromium: int
    rep: int
    start_ns: int = 0
    end_ns: int = 0
    load_1min: float = 0.0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    draws: int = 0  # match frames the timed browser drew
    ws_frames: int = 0  # frames the WebSocket clients received, together


@dataclass
class SocketViewers:
    """WebSocket clients of the dashboard that receive every frame and count it, for viewers beyond the browsers."""

    url: str
    session: aiohttp.ClientSession
    phase: Phase | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def resize(self, count: int) -> None:
        while len(self.tasks) > count:
            task = self.tasks.pop()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        while len(self.tasks) < count:
            self.tasks.append(asyncio.create_task(self._client()))

    async def _client(self) -> None:
        try:
            async with self.session.ws_connect(self.url, timeout=aiohttp.ClientWSTimeout(ws_close=10)) as ws:
                await ws.send_str(orjson.dumps({"want": WANTED}).decode())
                async for _message in ws:
                    if self.phase is not None:
                        self.phase.ws_frames += 1
        except Exception as exc:
            print(f"WebSocket client failed: {exc!r}", file=sys.stderr, flush=True)
            raise


async def direct(repository: str, stream: str, out: list[tuple[int, int]]) -> None:
    """The same stream straight from PAN: the query delay the dashboard adds to."""
    try:
        async with StreamSubscriber(stream, repository, start="latest") as subscriber:
            async for t in subscriber:
                out.append((t["ts"], time.time_ns()))
    except Exception as exc:
        print(f"direct reader of {stream} failed: {exc!r}", file=sys.stderr, flush=True)
        raise


async def collect(browsers: chromium.Chromiums, page: Any, out: list[tuple[str, int, int]]) -> None:
    """Move the timed page's trace here: (stream, ts, drawn at ns)."""
    while True:
        for stream, ts, at_ms in await browsers.script(page, "return window.panTrace.splice(0)"):
            out.append((stream, int(ts), int(at_ms * 1e6)))
        await asyncio.sleep(COLLECT_S)


async def draws(browsers: chromium.Chromiums, page: Any) -> int:
    return int(await browsers.script(page, "return window.panDraws"))


async def phases(args: argparse.Namespace, workflow: Path, repository: str, done: list[Phase],
                 straight: dict[str, list[tuple[int, int]]], drawn: list[tuple[str, int, int]]) -> None:
    import psutil

    port = free_port()
    dashboard = common.Child([sys.executable, "-m", "pan", "dashboard", "--workflow", str(workflow), "--port",
                              str(port)], startup_s=START_S)
    page_url = f"http://127.0.0.1:{port}/"
    async with dashboard, aiohttp.ClientSession() as session, chromium.Chromiums(args.chromium) as browsers:
        process = psutil.Process(dashboard.pid)
        readers = [asyncio.create_task(direct(repository, s, straight[s])) for s in TIMED]
        timed, extras = browsers.drivers[0], browsers.drivers[1:]
        sockets = SocketViewers(f"ws://127.0.0.1:{port}/ws", session)
        showing: set[int] = set()  # extras showing the page
        collector: asyncio.Task[None] | None = None
        try:
            await browsers.open([timed], page_url + "?trace=" + ",".join(TIMED))
            async with asyncio.timeout(START_S):  # the match has begun: the timed page draws positions
                while True:
                    if await browsers.script(timed, "return window.panTrace.length > 0"):
                        break
                    await asyncio.sleep(0.5)
            collector = asyncio.create_task(collect(browsers, timed, drawn))
            for rep in range(args.reps):
                for count in COUNTS:
                    real = min(count, args.chromium)
                    joining = [n for n in range(real - 1) if n not in showing]
                    leaving = [n for n in showing if n >= real - 1]
                    await browsers.open([extras[n] for n in joining], page_url)
                    await browsers.open([extras[n] for n in leaving], "about:blank")
                    showing = set(range(real - 1))
                    await sockets.resize(count - real)
                    await asyncio.sleep(SETTLE_S)
                    phase = Phase(count, real, rep, load_1min=round(os.getloadavg()[0], 2))
                    cpu, started, before = process.cpu_times(), time.monotonic(), await draws(browsers, timed)
                    phase.start_ns = time.time_ns()
                    sockets.phase = phase
                    await asyncio.sleep(args.phase_s)
                    sockets.phase = None
                    phase.end_ns = time.time_ns()
                    after = process.cpu_times()
                    phase.wall_s = time.monotonic() - started
                    phase.cpu_s = (after.user - cpu.user) + (after.system - cpu.system)
                    phase.draws = await draws(browsers, timed) - before
                    done.append(phase)
                    print(f"phase {rep + 1}/{args.reps}, {count} viewers ({real} Chromium): "
                          f"CPU {phase.cpu_s / phase.wall_s * 100:.0f}%, {phase.draws} frames drawn, "
                          f"load {phase.load_1min}", file=sys.stderr, flush=True)
            await asyncio.sleep(2 * COLLECT_S)  # the last phase's trace
        finally:
            if collector is not None:
                collector.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await collector
            await sockets.resize(0)
            for task in readers:
                task.cancel()


async def measure(args: argparse.Namespace, work: Path, data: Path) -> tuple[list[Phase], dict[str, Any]]:
    from pan.workflow.parser import load_workflow
    from simulator.replay import replay
    from simulator.simulate import simulate
    from simulator.simulate_options import SimulateOptions

    path = on_free_ports_copy(ROOT / "workflows" / "full_game_3_peers.json", work)
    workflow = load_workflow(path)
    options = SimulateOptions(workflow=workflow, data_dir=data, speedup=1.0, send_log=work / SEND_LOG,
                              skip_halftime=True)
    done: list[Phase] = []
    straight: dict[str, list[tuple[int, int]]] = {s: [] for s in TIMED}
    drawn: list[tuple[str, int, int]] = []

    async def feed() -> Any:
        return (await simulate(options)).as_dict()

    await replay(path, workflow, feed, work / "record", only=["BP_wholeGame_B"],
                 observer=lambda: phases(args, path, workflow.repository.address, done, straight, drawn))
    return done, summarize(done, work / SEND_LOG, straight, drawn)


def summarize(done: list[Phase], send_log: Path, straight: dict[str, list[tuple[int, int]]],
              drawn: list[tuple[str, int, int]]) -> dict[str, Any]:
    """Per viewer count: CPU and drawn frames (median, min-max over phases) and screen delays (per phase, combined)."""
    # One pass over the (large) send log for every phase's tuples: keys "stream|phase" are derived streams to `delays`.
    received: dict[str, list[tuple[int, int]]] = {f"{s}|direct": v for s, v in straight.items()}
    for n, p in enumerate(done):
        for s in TIMED:
            received[f"{s}|{n}"] = [(ts, at) for name, ts, at in drawn if name == s and p.start_ns <= at < p.end_ns]
    late = delays(send_log, received)
    rows: dict[str, Any] = {}
    for count in COUNTS:
        mine = [(n, p) for n, p in enumerate(done) if p.viewers == count]
        cpu = [p.cpu_s / p.wall_s * 100 for _, p in mine]
        fps = [p.draws / p.wall_s for _, p in mine]
        with_sockets = [p for _, p in mine if p.viewers > p.chromium]
        per_phase = {s: [common.summarize_ms(late[f"{s}|{n}"]) for n, _ in mine] for s in TIMED}
        first = mine[0][1] if mine else None
        rows[str(count)] = {
            "phases": len(mine),
            "chromium": first.chromium if first else None,
            "websocket_clients": count - first.chromium if first else None,
            "load_1min": [p.load_1min for _, p in mine],
            "cpu_percent": spread(cpu),
            "frames_drawn_per_s": spread(fps),
            "websocket_frames_per_s_per_client": round(common.median(
                p.ws_frames / p.wall_s / (p.viewers - p.chromium) for p in with_sockets), 2) if with_sockets else None,
            "screen_delay_ms": {s: common.combine_delays(per_phase[s]) if per_phase[s] else None for s in TIMED},
        }
    rows["pan_direct"] = {"delay_ms": {s: common.summarize_ms(late[f"{s}|direct"]) for s in TIMED}}
    return rows


def spread(values: list[float]) -> dict[str, float | None]:
    return {"median": round(common.median(values), 2) if values else None,
            "min": round(min(values), 2) if values else None, "max": round(max(values), 2) if values else None}


def run(args: argparse.Namespace) -> int:
    if args.reps < 1 or args.phase_s <= 0 or not 1 <= args.chromium <= max(COUNTS):
        print(f"pan bench dashboard: --reps must be >= 1, --phase-s > 0 and --chromium in 1..{max(COUNTS)}",
              file=sys.stderr)
        return 2
    if (why := chromium.missing()) is not None:
        print(f"pan bench dashboard: {why}", file=sys.stderr)
        return 2
    machine = common.machine()
    phase_s = len(COUNTS) * args.reps * (args.phase_s + SETTLE_S + 3.0)
    minutes = (phase_s + MARGIN_S + PER_CHROMIUM_S * args.chromium) / 60
    load_at_start = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="pan-dash-bench-") as tmp:
        work = Path(tmp)
        from simulator.realistic import generate

        generate(work / "game", minutes, args.seed)
        data = plain_split(work / "game", work / "split")
        done, viewers = eventloop.run(measure(args, work, data))
        summary = {**common.run_header("dashboard"), "minutes": round(minutes, 2), "reps": args.reps,
                   "phase_s": args.phase_s, "chromium": args.chromium, "viewers": viewers,
                   "load_at_start": load_at_start, "load_at_end": [round(x, 2) for x in os.getloadavg()]}
    common.publish(summary, args.write, SECTION, lambda: report(summary, machine))
    return 0 if done else 1


def delay_cell(s: dict[str, Any] | None) -> str:
    if s is None:
        return "-"
    return f"{common.with_spread(s, 'p50_ms')} / {common.with_spread(s, 'p99_ms')}"


def report(summary: dict[str, Any], machine: dict[str, Any]) -> str:
    rows = []
    loads: list[float] = []
    for count in COUNTS:
        r = summary["viewers"][str(count)]
        loads += r["load_1min"]
        cpu, fps = r["cpu_percent"], r["frames_drawn_per_s"]
        rows.append([f"{count} ({r['chromium']} Chromium + {r['websocket_clients']} WebSocket)", r["phases"],
                     f"{common.fmt(cpu['median'])} ({common.fmt(cpu['min'])}-{common.fmt(cpu['max'])})",
                     f"{common.fmt(fps['median'])} ({common.fmt(fps['min'])}-{common.fmt(fps['max'])})",
                     *(delay_cell(r["screen_delay_ms"][s]) for s in TIMED)])
    direct_row = summary["viewers"]["pan_direct"]["delay_ms"]
    rows.append(["PAN directly (query delay)", "-", "-", "-",
                 *(f"{common.fmt(direct_row[s]['p50_ms'])} / {common.fmt(direct_row[s]['p99_ms'])}" for s in TIMED)])
    table = common.markdown_table(["viewers", "phases", "dashboard CPU % median (min-max)",
                                   "frames drawn/s, timed browser", *(f"`{s}` to screen p50 / p99 ms" for s in TIMED)],
                                  rows)
    load_text = f"{min(loads):.2f}-{max(loads):.2f}" if loads else "-"
    return "\n".join([
        "## pan dashboard: browsers, CPU and tuple-to-screen delay (issue 16)",
        "",
        f"{common.utc_now()}. {common.machine_line(machine, summary['load_at_end'])}",
        f"Command: `{common.command_line()}`; {summary['minutes']} min generated match replayed in real time into "
        f"`full_game_3_peers.json`, `pan dashboard` beside it; {summary['reps']} rounds of 1, 10 and 50 viewers, "
        f"{summary['phase_s']:g} s each (module docstring of `benchmarks/dashboard_bench.py`). "
        f"1-minute load average at the phases' starts: {load_text} (other work shared the machine).",
        f"Viewers: up to {summary['chromium']} real headless Chromium instances (one process tree each) showing the "
        "match page; the rest of the 50 are WebSocket clients that receive every frame but do not draw.",
        "To screen = when the timed browser finished drawing the frame with the tuple (its opt-in `?trace=` hook, "
        "`performance.timeOrigin + performance.now()`) - when the simulator sent the sensor row the tuple answers "
        "into the forwarder; per phase, then the median over phases with their min-max in brackets. The last row is "
        "the query delay of the same streams read straight from PAN, over the whole run.",
        "Only tuples a frame drew count (the newest of a burst; the ones it skipped are never drawn), while the "
        "direct row counts every tuple, backlog included, over the whole run: on a machine this loaded the "
        "workflow falls behind in bursts, so the direct row can be later than the screen.",
        "",
        table,
    ])
