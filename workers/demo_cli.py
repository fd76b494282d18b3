"""`pan demo`: a generated match, split with Spark, replayed into the full-game workflow.

Prints a live summary while the match runs (possession, shots, top sprinters)
and leaves the query answers recorded in a folder it names at the end: the
streams of the four queries (``QUERY_STREAMS``) and their ``_late`` sides, not
the sensor-rate streams between them (the sensors' own streams, player
averages, the active ball, the interruption heartbeats: 4/5 of a full
recording's bytes). ``--record-all`` records every output stream.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from pan.config.specs import Workflow, WorkflowError
from pan.launch.launcher import is_local_host, repositories_to_start
from pan.offline.spark import SparkUnavailable
from pan.offline.spark_progress import spark_stages
from pan.repository.client import NoPublisher, RepositoryClient, RepositoryUnavailable
from pan.util import console, eventloop
from pan.workflow.parser import load_workflow
from pan.workflow.preflight import ports_in_use
from simulator.realistic import generate
from simulator.replay import (
    SUPERVISED_CONNECT_TIMEOUT_S,
    SUPERVISED_GIVE_UP_S,
    WorkflowStopped,
    output_streams,
    replay,
)
from simulator.simulate import simulate
from simulator.simulate_options import SimulateOptions
from simulator.split import split
from workers import shipped
from workers.dashboard.cli import serve
from workers.debs import FIRST_HALF, PLAYERS, PS_PER_S

DEFAULT_WORKFLOW = shipped.workflow("full_game_3_peers.json")
SUMMARY_EVERY_S = 2.0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("demo", help="generate a match and analyse it live with the full-game workflow")
    p.add_argument("--minutes", type=float, default=2.0, help="minutes of play to generate (default 2)")
    p.add_argument("--seed", type=int, default=2013, help="random seed of the generated match")
    p.add_argument("--workflow", default=str(DEFAULT_WORKFLOW), help="workflow file")
    p.add_argument("--out", type=Path, default=Path("demo-out"), help="working folder, in the current directory")
    p.add_argument("--speedup", type=float, default=0.0,
                   help="replay speed; 0 = as fast as possible (above 0 the half-time break is skipped)")
    p.add_argument("--record-all", action="store_true",
                   help="record every output stream, the sensor-rate ones too (a 2-minute match: about 0.6 GB)")
    p.add_argument("--dashboard", type=int, default=None, metavar="PORT",
                   help="also serve `pan dashboard` of the replay on this port (0: any free port)")
    p.set_defaults(handler=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    try:
        workflow = load_workflow(args.workflow)
    except WorkflowError as exc:
        print(f"pan demo: --workflow {exc}", file=sys.stderr)
        return 2
    taken = ports_in_use(workflow, is_local_host, repositories_to_start(workflow))
    if taken:  # found before minutes of generating and splitting
        print(f"pan demo: port(s) in use: {', '.join(taken)} (another demo or `pan run`?)", file=sys.stderr)
        return 1
    game, split_dir, record = args.out / "game", args.out / "split", args.out / "streams"
    print(f"1/3 generating {args.minutes} minutes of match (seed {args.seed}) into {game}", flush=True)
    with console.progress_bar("generate", None, unit="slices") as bar:
        generate(game, args.minutes, args.seed, on_slice=lambda done, total: bar.update(done, total=total))
    print(f"2/3 splitting it per sensor with Spark into {split_dir}", flush=True)
    try:
        with spark_stages("split"):
            split(game / "full-game", split_dir)
    except SparkUnavailable as exc:  # no pyspark or no Java: say which, in one line
        print(f"pan demo: {exc}", file=sys.stderr)
        return 2
    print(f"3/3 replaying it into '{workflow.name}'", flush=True)
    options = SimulateOptions(workflow=workflow, data_dir=split_dir, speedup=args.speedup,
                              skip_halftime=args.speedup > 0, progress=True, give_up_s=SUPERVISED_GIVE_UP_S,
                              connect_timeout_s=SUPERVISED_CONNECT_TIMEOUT_S)

    async def feed() -> Any:
        return (await simulate(options)).as_dict()

    async def observe() -> None:
        watchers = [_live(workflow)]
        if args.dashboard is not None:
            addresses = workflow.repository_addresses
            watchers.append(serve(addresses, None, None, "127.0.0.1", args.dashboard, signals=False))
        await asyncio.gather(*watchers)

    try:
        only = None if args.record_all else recorded_streams(output_streams(workflow))
        result = eventloop.run(replay(Path(args.workflow), workflow, feed, record, observer=observe, only=only))
    except (WorkflowStopped, RuntimeError) as exc:  # a peer ended: named, with the end of its log
        print(f"pan demo: {exc}", file=sys.stderr)
        return 1
    print(summary_line(_final(record)))
    print(queries_line(record))
    print(f"\n{sum(result.streams.values())} output tuples on {len(result.streams)} streams recorded in {record}/")
    print(f"(feed {result.feed_s:.1f} s, whole run {result.elapsed_s:.1f} s)")
    return 0 if not result.missed else 1


async def _latest(session: aiohttp.ClientSession, workflow: Workflow, stream: str) -> dict[str, Any] | None:
    """The newest tuple of a stream, from whichever publisher the repository names."""
    repo = workflow.repository
    timeout = aiohttp.ClientTimeout(total=2)
    with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError, ValueError, KeyError, NoPublisher,
                             RepositoryUnavailable):
        source = await RepositoryClient((repo.host, repo.port), session=session).lookup(stream)  # checked address
        async with session.get(source.url("/data"), params={"s": stream, "l": "1"}, timeout=timeout) as r:
            tuples = orjson.loads(await r.read())["tuples"]
        return tuples[0] if tuples else None
    return None


async def _live(workflow: Workflow) -> None:
    async with aiohttp.ClientSession() as session:
        while True:
            await asyncio.sleep(SUMMARY_EVERY_S)
            names = ["BP_wholeGame_A", "BP_wholeGame_B", "SHOTS", *(f"RUNAGG_wholeGame_{p}" for p in PLAYERS)]
            latest = await asyncio.gather(*(_latest(session, workflow, s) for s in names))
            if any(latest):  # none: the workflow is not up yet, or stops (the final line follows)
                print(summary_line(dict(zip(names, latest, strict=True))), flush=True)


def _final(record: Path) -> dict[str, Any]:
    latest: dict[str, Any] = {}
    for path in record.glob("*.jsonl"):
        lines = path.read_bytes().splitlines()
        if lines and (path.stem.startswith(("BP_wholeGame_", "RUNAGG_wholeGame_")) or path.stem == "SHOTS"):
            latest[path.stem] = orjson.loads(lines[-1])
    return latest


#: Each query family by the prefixes of its output streams (README, "Output streams"); late side outputs aside.
QUERY_STREAMS = {
    "running (Q1)": ("RUN_", "RUNAGG_"),
    "possession (Q2)": ("BP_",),
    "ball hits (Q2)": ("BALLHITS",),
    "heat maps (Q3)": ("HM_",),
    "shots (Q4)": ("SHOTS",),
}


def recorded_streams(streams: list[str]) -> list[str]:
    """The streams the demo records by default: those of the queries, with their late sides."""
    prefixes = tuple(prefix for family in QUERY_STREAMS.values() for prefix in family)
    return [s for s in streams if s.startswith(prefixes)]


def queries_line(record: Path) -> str:
    """Whether every query answered in the recording, with its tuple count and the players who sprinted: the
    demo is meant to show each of them (its default match has shots and sprints)."""
    counts = dict.fromkeys(QUERY_STREAMS, 0)
    sprinters = set()
    for path in record.glob("*.jsonl"):
        if path.stem.endswith("_late"):
            continue
        for query, prefixes in QUERY_STREAMS.items():
            if path.stem.startswith(prefixes):
                lines = path.read_bytes().splitlines()
                counts[query] += len(lines)
                if path.stem.startswith("RUN_") and any(orjson.loads(line).get("intensity") == "sprint"
                                                        for line in lines):
                    sprinters.add(path.stem.removeprefix("RUN_"))
    silent = [query for query, count in counts.items() if count == 0]
    answered = ", ".join(f"{query} {count:,}" for query, count in counts.items() if count)
    sprints = f"; sprints by {len(sprinters)} player(s)" if sprinters else "; no sprint"
    if silent:
        return f"queries: no output from {', '.join(silent)} (a longer --minutes or another --seed may show it); " \
               f"answered: {answered or 'none'}{sprints}"
    return f"every query answered: {answered}{sprints}"


def summary_line(latest: dict[str, Any]) -> str:
    """One line: game clock, possession shares, shots so far, the three players who ran most."""
    game_ts = max((t["ts"] for t in latest.values() if t), default=FIRST_HALF[0])
    clock = max(0, (game_ts - FIRST_HALF[0]) // PS_PER_S)
    share = {team: (latest.get(f"BP_wholeGame_{team}") or {}).get("time_percent") for team in "AB"}
    possession = " ".join(f"{t} {v:.1f}%" if isinstance(v, float | int) else f"{t} -" for t, v in share.items())
    shots = (latest.get("SHOTS") or {}).get("shot")
    distances = sorted(
        (
            (sum(v for k, v in t.items() if k.endswith("_distance")), t.get("sprint_distance", 0.0), p)
            for p in PLAYERS
            if (t := latest.get(f"RUNAGG_wholeGame_{p}"))
        ),
        reverse=True,
    )[:3]
    top = ", ".join(f"{p} {d:.0f} m ({s:.0f} m sprint)" for d, s, p in distances) or "-"
    return (
        f"[{time.strftime('%H:%M:%S')}] game {clock // 60:02d}:{clock % 60:02d} | possession {possession} | "
        f"shots {shots if shots is not None else 0} | ran most {top}"
    )


