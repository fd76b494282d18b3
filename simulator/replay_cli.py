"""`pan replay`: a workflow fed by the sensor simulator, every output recorded.

The harness is simulator/replay.py; this module only supplies the
simulator as its feed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from pan.config.specs import Workflow, WorkflowError
from pan.config.trust import Trust
from pan.launch.launcher import is_local_host, repositories_to_start
from pan.launch.lifeline import die_with_launcher
from pan.security.auth import AuthError
from pan.security.tls import TlsError
from pan.util import console, eventloop
from pan.wire import arrow_pages
from pan.workflow.parser import load_workflow, on_free_ports, with_absolute_paths
from pan.workflow.preflight import ports_in_use
from simulator import recording
from simulator.backpressure import FeedBrake
from simulator.impair import ImpairProfile, ProfileError
from simulator.replay import PACED, SUPERVISED_CONNECT_TIMEOUT_S, SUPERVISED_GIVE_UP_S, UNPACED, replay
from simulator.simulate import simulate
from simulator.simulate_options import CONNECT_TIMEOUT_S, GIVE_UP_S, SimulateError, SimulateOptions
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
    p.add_argument("--wire", choices=["json", "auto", "arrow"],
                   help="page format of the whole replay, as PAN_WIRE for every peer and the recorder's (json: no "
                   "Arrow; auto: Arrow only for readers that compute on columns, the recorder reads line pages; "
                   "arrow: every reader asks for Arrow) (default: PAN_WIRE of this process, else json)")
    p.add_argument("--record-decoded", action="store_true",
                   help="the recorder decodes every tuple and encodes it again, instead of writing the bytes of "
                   "line pages as they come (the same recording; for benchmarks)")
    p.add_argument("--compress", action="store_true",
                   help="write each stream zstd-compressed, OUTDIR/<stream>.jsonl.zst (a whole match: about 3 GB "
                   "instead of 16; needs zstandard, the record extra)")
    p.add_argument("--free-ports", action="store_true",
                   help="move the repository and every worker to free ports (OUTDIR/workflow.json), so that "
                   "several replays can run on one machine")
    p.add_argument("--strict-pace", action="store_true",
                   help="keep the pace whatever happens, as a live deployment must: a workflow that falls behind "
                   "loses what its buffers overwrite, reported in 'missed' (exit 1). By default the replay loses "
                   "nothing: the workflow runs with delivery 'lossless' (OUTDIR/workflow.json) and the feed waits "
                   "while it is behind (simulator/backpressure.py)")
    p.add_argument("--attach", action="store_true",
                   help="the workflow runs already (e.g. `pan deploy up`): start no peers, only feed and record; "
                   "its own delivery setting stands (give it \"delivery\": \"lossless\" to lose nothing)")
    p.add_argument("--json", action="store_true",
                   help="print the full report as JSON (every stream's count) instead of the summary table")
    p.set_defaults(handler=run)


def prepared_workflow(path: Path, out_dir: Path, *, free_ports: bool, lossless: bool) -> Path:
    """``path`` itself, or a copy next to the recording moved to free ports and/or with lossless delivery."""
    workflow = load_workflow(path)  # a broken file is reported as such before anything is changed
    if not free_ports and (not lossless or workflow.delivery == "lossless"):
        return path
    data = with_absolute_paths(orjson.loads(path.read_bytes()), path)
    if free_ports:
        data = on_free_ports(data)
    if lossless:
        data["delivery"] = "lossless"
    out_dir.mkdir(parents=True, exist_ok=True)
    prepared = out_dir / "workflow.json"
    prepared.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    return prepared


def preflight(workflow: Workflow, data: Path, check_ports: bool = True) -> str | None:
    """What would make the replay fail once started, found before anything starts (None: nothing)."""
    if not data.is_dir():
        return f"--data {data}: no such folder (a folder written by `pan split`)"
    if not sensor_files(data):
        return f"--data {data}: no SENSOR<id>.csv files in it (a folder written by `pan split`)"
    taken = ports_in_use(workflow, is_local_host, repositories_to_start(workflow)) if check_ports else []
    if taken:
        return f"port(s) in use: {', '.join(taken)} (another replay or `pan run`? --free-ports moves the workflow)"
    return None


def run(args: argparse.Namespace) -> int:
    die_with_launcher()  # started by a benchmark or a script: stop when it is gone
    if args.attach and args.free_ports:
        print("pan replay: --attach and --free-ports exclude each other (an attached workflow keeps its ports)",
              file=sys.stderr)
        return 2
    try:
        workflow = load_workflow(args.workflow)
        impair = ImpairProfile.load(args.impair) if args.impair else None
        Trust.of(workflow)  # a closed workflow's secret and CA must load before anything starts
    except (WorkflowError, ProfileError, OSError, AuthError, TlsError) as exc:
        print(f"pan replay: {exc}", file=sys.stderr)
        return 2
    if args.speedup < 0:
        print("pan replay: --speedup must be >= 0", file=sys.stderr)
        return 2
    if args.wire in ("auto", "arrow") and not arrow_pages.available():
        print(f"pan replay: --wire {args.wire} needs pyarrow (pip install 'pan[arrow]')", file=sys.stderr)
        return 2
    if args.compress and not recording.can_compress():
        print("pan replay: --compress needs zstandard (pip install 'pan[record]')", file=sys.stderr)
        return 2
    # Ports are the workflow's own unless it runs already (--attach) or moves to free ones (--free-ports).
    problem = preflight(workflow, args.data, check_ports=not (args.attach or args.free_ports))
    if problem is not None:
        print(f"pan replay: {problem}", file=sys.stderr)
        return 2
    try:  # only now is anything written: the workflow as this replay runs it, next to the recording
        workflow_path = prepared_workflow(Path(args.workflow), args.record, free_ports=args.free_ports,
                                          lossless=not (args.strict_pace or args.attach))
        workflow = load_workflow(workflow_path)
    except (WorkflowError, OSError) as exc:
        print(f"pan replay: {exc}", file=sys.stderr)
        return 2
    options = SimulateOptions(
        workflow=workflow,
        data_dir=args.data,
        speedup=args.speedup,
        impair=impair,
        from_ts=args.from_ts,
        to_ts=args.to_ts,
        skip_halftime=args.skip_halftime,
        brake=None if args.strict_pace else FeedBrake(workflow),
        progress=True,  # a bar on a terminal, nothing otherwise
        # with --attach the peers are someone else's: a receiver that does not answer may be gone for good
        give_up_s=GIVE_UP_S if args.attach else SUPERVISED_GIVE_UP_S,
        connect_timeout_s=CONNECT_TIMEOUT_S if args.attach else SUPERVISED_CONNECT_TIMEOUT_S,
    )

    async def feed() -> dict:
        return (await simulate(options)).as_dict()

    try:
        result = eventloop.run(replay(Path(workflow_path), workflow, feed, args.record, quiet_s=args.quiet_s,
                                   until_ended=True, wire=args.wire, attach=args.attach,
                                   decode=args.record_decoded, pace=PACED if args.speedup else UNPACED,
                                   compress=args.compress))
    except (SimulateError, RuntimeError) as exc:  # WorkflowStopped: a peer ended, named with its log's end
        print(f"pan replay: {exc}", file=sys.stderr)
        return 1
    report = {
        "record": str(args.record),
        "elapsed_s": round(result.elapsed_s, 3),
        "feed_s": round(result.feed_s, 3),
        "recorded_s": round(result.recorded_s, 3),  # from the first row fed to the last output recorded
        "wire": result.wire,
        "cpu_s": {k: round(v, 3) for k, v in result.cpu_s.items()},
        "recorder": result.recorder_requests,
        "speedup": args.speedup,
        # seconds of match per second, from the first row fed to the last output recorded: what a user waits for
        "achieved_speedup": round(result.feed.get("event_s", 0.0) / result.recorded_s, 3) if result.recorded_s
        else None,
        "feed_speedup": result.feed.get("achieved_speedup"),  # the feed alone, stalls included
        "held": result.feed.get("held"),  # the feed's stalls while the workflow was behind (None: --strict-pace)
        "tuples": sum(result.streams.values()),
        "streams": result.streams,
        "json_bytes": result.json_bytes,  # per stream: of JSON lines, before any compression (--compress)
        "missed": result.missed,
        "sent": sum(s.get("sent", 0) for s in result.feed.get("streams", {}).values()),
        "no_data": result.feed.get("no_data", []),  # sensors the workflow expects but the data lacks
        "feed_errors": result.feed.get("errors", []),
        "failed_tasks": result.failed_tasks,  # worker -> task -> error: a dead input pull or component
    }
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print_summary(report)
    return 0 if not result.missed and not result.failed_tasks else 1


def speed_text(report: dict) -> str:
    """How fast the match went by against the asked --speedup, and how long the feed waited for the workflow."""
    asked = "as fast as possible" if not report["speedup"] else f"{report['speedup']:g}x asked"
    achieved = report.get("achieved_speedup")
    text = f"{achieved:g}x real time ({asked})" if achieved is not None else asked
    held = report.get("held")
    if held is None:
        return text + ", strict pace"
    if held["stalls"]:
        text += f", the feed waited {held['stalls']} time(s), {held['stalled_s']:.1f} s in all, longest " \
                f"{held['longest_stall_s']:.1f} s (for {held['held_by']})"
    return text


def print_summary(report: dict) -> None:
    """A few lines for a person: what was fed, what was recorded and where; --json has every stream."""
    streams: dict[str, int] = report["streams"]
    busiest = sorted(streams.items(), key=lambda item: -item[1])[:3]
    rows = [
        ("rows fed", f"{report['sent']:,}"),
        ("output tuples", f"{report['tuples']:,} on {len(streams)} streams, "
                          f"{sum(report['json_bytes'].values()) / 1e6:,.1f} MB of JSON"),
        ("busiest streams", ", ".join(f"{name} {count:,}" for name, count in busiest) or "-"),
        ("streams that missed tuples", ", ".join(report["missed"]) or "none"),
        ("sensors without data", ", ".join(report["no_data"]) or "none"),
        ("feed errors", "; ".join(report["feed_errors"]) or "none"),
        ("failed worker tasks", "; ".join(f"{task} ({error})" for tasks in report["failed_tasks"].values()
                                          for task, error in tasks.items()) or "none"),
        ("time", f"{report['elapsed_s']:.1f} s (feed {report['feed_s']:.1f} s), wire {report['wire']}"),
        ("speed", speed_text(report)),
        ("recorded in", f"{report['record']}/<stream>.jsonl (logs in {report['record']}/logs/)"),
    ]
    console.table("pan replay", ["", ""], rows)
