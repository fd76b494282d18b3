"""`pan replay`: a workflow fed by the sensor simulator, every output recorded.

The harness is simulator/replay.py; this module only supplies the
simulator as its feed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from pan import arrow_pages, console, eventloop
from pan.auth import AuthError
from pan.launcher import is_local_host, repositories_to_start
from pan.lifeline import die_with_launcher
from pan.preflight import ports_in_use
from pan.specs import Workflow, WorkflowError
from pan.tls import TlsError
from pan.trust import Trust
from pan.workflow import load_workflow, on_free_ports
from simulator.impair import ImpairProfile, ProfileError
from simulator.replay import replay
from simulator.simulate import SimulateError, SimulateOptions, simulate
from simulator.sources import sensor_files


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "replay",
        help="run a workflow on a split folder and record every output stream to OUTDIR/<stream>.jsonl",
    )
    p.add_argument("workflow")
    p.add_argument("--data", required=True, type=Path, help="folder written by `pan split`")
    p.add_argument("--record", required=True, type=Path, metavar="OUTDIR")
    p.add_argument("--speedup", type=float, default=0.0, help="event-time factor; 0 = as fast as possible")
    p.add_argument("--impair", type=Path, metavar="PROFILE.json", help="impairment profile")
    p.add_argument("--from", dest="from_ts", type=int, metavar="TS")
    p.add_argument("--to", dest="to_ts", type=int, metavar="TS")
    p.add_argument("--skip-halftime", action="store_true", help="leave out the break between the halves")
    p.add_argument("--quiet-s", type=float, default=6.0,
                   help="outputs without a watermark (which never end) quiet this long after the data = done; "
                   "outputs with one end with the data and are waited for")
    p.add_argument("--wire", choices=["json", "arrow"],
                   help="page format of the whole replay: the recorder's and, as PAN_WIRE, every peer's "
                   "(default: PAN_WIRE of this process, else json)")
    p.add_argument("--free-ports", action="store_true",
                   help="move the repository and every worker to free ports (OUTDIR/workflow.json), so that "
                   "several replays can run on one machine")
    p.add_argument("--json", action="store_true",
                   help="print the full report as JSON (every stream's count) instead of the summary table")
    p.set_defaults(handler=run)


def moved_to_free_ports(path: Path, out_dir: Path) -> Path:
    """A copy of the workflow on free ports, written next to the recording."""
    load_workflow(path)  # a broken file is reported as such before anything is moved
    data = orjson.loads(path.read_bytes())
    out_dir.mkdir(parents=True, exist_ok=True)
    moved = out_dir / "workflow.json"
    moved.write_bytes(orjson.dumps(on_free_ports(data), option=orjson.OPT_INDENT_2))
    return moved


def preflight(workflow: Workflow, data: Path) -> str | None:
    """What would make the replay fail once started, found before anything starts (None: nothing)."""
    if not data.is_dir():
        return f"--data {data}: no such folder (a folder written by `pan split`)"
    if not sensor_files(data):
        return f"--data {data}: no SENSOR<id>.csv files in it (a folder written by `pan split`)"
    taken = ports_in_use(workflow, is_local_host, repositories_to_start(workflow))
    if taken:
        return f"port(s) in use: {', '.join(taken)} (another replay or `pan run`? --free-ports moves the workflow)"
    return None


def run(args: argparse.Namespace) -> int:
    die_with_launcher()  # started by a benchmark or a script: stop when it is gone
    try:
        workflow_path = moved_to_free_ports(Path(args.workflow), args.record) if args.free_ports else args.workflow
        workflow = load_workflow(workflow_path)
        impair = ImpairProfile.load(args.impair) if args.impair else None
        Trust.of(workflow)  # a closed workflow's secret and CA must load before anything starts
    except (WorkflowError, ProfileError, OSError, AuthError, TlsError) as exc:
        print(f"pan replay: {exc}", file=sys.stderr)
        return 2
    if args.speedup < 0:
        print("pan replay: --speedup must be >= 0", file=sys.stderr)
        return 2
    if args.wire == "arrow" and not arrow_pages.available():
        print("pan replay: --wire arrow needs pyarrow (pip install 'pan[arrow]')", file=sys.stderr)
        return 2
    problem = preflight(workflow, args.data)
    if problem is not None:
        print(f"pan replay: {problem}", file=sys.stderr)
        return 2
    options = SimulateOptions(
        workflow=workflow,
        data_dir=args.data,
        speedup=args.speedup,
        impair=impair,
        from_ts=args.from_ts,
        to_ts=args.to_ts,
        skip_halftime=args.skip_halftime,
        progress=True,  # a bar on a terminal, nothing otherwise
    )

    async def feed() -> dict:
        return (await simulate(options)).as_dict()

    try:
        result = eventloop.run(replay(Path(workflow_path), workflow, feed, args.record, quiet_s=args.quiet_s,
                                   until_ended=True, wire=args.wire))
    except (SimulateError, RuntimeError) as exc:  # WorkflowStopped: a peer ended, named with its log's end
        print(f"pan replay: {exc}", file=sys.stderr)
        return 1
    report = {
        "record": str(args.record),
        "elapsed_s": round(result.elapsed_s, 3),
        "feed_s": round(result.feed_s, 3),
        "wire": result.wire,
        "tuples": sum(result.streams.values()),
        "streams": result.streams,
        "missed": result.missed,
        "sent": sum(s.get("sent", 0) for s in result.feed.get("streams", {}).values()),
        "no_data": result.feed.get("no_data", []),  # sensors the workflow expects but the data lacks
        "feed_errors": result.feed.get("errors", []),
    }
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print_summary(report)
    return 0 if not result.missed else 1


def print_summary(report: dict) -> None:
    """A few lines for a person: what was fed, what was recorded and where; --json has every stream."""
    streams: dict[str, int] = report["streams"]
    busiest = sorted(streams.items(), key=lambda item: -item[1])[:3]
    rows = [
        ("rows fed", f"{report['sent']:,}"),
        ("output tuples", f"{report['tuples']:,} on {len(streams)} streams"),
        ("busiest streams", ", ".join(f"{name} {count:,}" for name, count in busiest) or "-"),
        ("streams that missed tuples", ", ".join(report["missed"]) or "none"),
        ("sensors without data", ", ".join(report["no_data"]) or "none"),
        ("feed errors", "; ".join(report["feed_errors"]) or "none"),
        ("time", f"{report['elapsed_s']:.1f} s (feed {report['feed_s']:.1f} s), wire {report['wire']}"),
        ("recorded in", f"{report['record']}/<stream>.jsonl (logs in {report['record']}/logs/)"),
    ]
    console.table("pan replay", ["", ""], rows)
