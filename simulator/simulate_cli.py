"""`pan simulate`: replay a split folder as live sensors into a workflow's receivers."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path

import orjson

from pan.config.specs import WorkflowError
from pan.util import eventloop
from pan.workflow.parser import load_workflow
from simulator.clock import LocalTime, SkewedTime, TimeProvider
from simulator.impair import ImpairProfile, ProfileError
from simulator.simulate import simulate
from simulator.simulate_options import GIVE_UP_S, SimulateError, SimulateOptions
from simulator.wtt import DEFAULT_PORT, parse_address


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "simulate",
        help="replay a `pan split` folder as live sensors (one TCP connection per sensor)",
        description="Replay per-sensor files as independent sensors into the workflow's ingest receivers. "
        "Prints a JSON summary on stdout at the end.",
    )
    p.add_argument("--workflow", required=True, help="workflow file naming each stream's receiver")
    p.add_argument("--data", required=True, type=Path, help="folder written by `pan split`")
    p.add_argument("--sensors", help="comma-separated subset, e.g. SENSOR4,SENSOR8,INTERRUPTIONS (or 4,8)")
    p.add_argument("--share", metavar="K/N",
                   help="feed only the K-th of N shares of the sensors (dealt round robin by name, INTERRUPTIONS "
                   "with share 0): N simulators on N machines, one WTT clock, together feed every sensor once")
    p.add_argument("--speedup", type=float, default=1.0, help="event-time factor; 0 = unpaced (default 1)")
    p.add_argument("--start-at", type=int, metavar="EPOCH_MS", help="common start time on the (WTT) clock")
    p.add_argument("--skip-halftime", action="store_true",
                   help="leave out the break, from the first half's last row to the second half's first")
    p.add_argument("--from", dest="from_ts", type=int, metavar="TS", help="first ts to replay (ps)")
    p.add_argument("--to", dest="to_ts", type=int, metavar="TS", help="last ts to replay (ps)")
    p.add_argument("--impair", type=Path, metavar="PROFILE.json", help="impairment profile")
    wtt = p.add_mutually_exclusive_group()
    wtt.add_argument("--wtt-master", nargs="?", const=f"0.0.0.0:{DEFAULT_PORT}", metavar="HOST:PORT",
                     help=f"be the WeakTrueTime master (default 0.0.0.0:{DEFAULT_PORT})")
    wtt.add_argument("--wtt-slave", metavar="HOST:PORT", help="follow the WeakTrueTime master at HOST:PORT")
    p.add_argument("--wtt-timeout", type=float, default=10.0, help="seconds to wait for the first WTT time")
    p.add_argument("--send-log", type=Path, metavar="FILE", help="write stream,ts,send_ns per sent row")
    p.add_argument("--check-period-ms", type=float, default=10.0, help="pacing check period (default 10)")
    p.add_argument("--clock-offset-ms", type=float, default=0.0,
                   help="pretend this machine's clock is off by this much (demos of WTT)")
    p.add_argument("--clock-drift-ppm", type=float, default=0.0, help="pretend this machine's clock drifts")
    p.add_argument("--give-up-s", type=float, default=GIVE_UP_S,
                   help="unpaced: seconds to wait for an unreachable receiver before counting rows lost")
    p.add_argument("--quiet", action="store_true", help="no progress bar (there is none off a terminal anyway)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        options = build_options(args)
    except (WorkflowError, ProfileError, ValueError) as exc:
        print(f"pan simulate: {exc}", file=sys.stderr)
        return 2
    try:
        summary = eventloop.run(_run(options))
    except SimulateError as exc:
        print(f"pan simulate: {exc}", file=sys.stderr)
        return 2
    sys.stdout.buffer.write(orjson.dumps(summary, option=orjson.OPT_INDENT_2) + b"\n")
    if summary["errors"]:
        print(f"pan simulate: {failure_line(summary)}", file=sys.stderr)
        return 1
    return 0


def failure_line(summary: dict) -> str:
    """One line for a run with errors: how many rows were lost and the first error (the full list is in the JSON)."""
    errors = summary["errors"]
    more = f" (and {len(errors) - 1} more errors)" if len(errors) > 1 else ""
    return f"{summary['sent']} rows sent, {summary['lost']} lost; {errors[0]}{more}"


async def _run(options: SimulateOptions) -> dict:
    stop = asyncio.Event()
    options.stop = stop
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    return (await simulate(options)).as_dict()


def parse_share(text: str) -> tuple[int, int]:
    """``K/N`` with 0 <= K < N, else ValueError (reported as one line)."""
    k, _, n = text.partition("/")
    if not (k.isdigit() and n.isdigit() and 0 <= int(k) < int(n)):
        raise ValueError(f"--share {text!r}: give K/N with 0 <= K < N, e.g. 0/3")
    return int(k), int(n)


def build_options(args: argparse.Namespace) -> SimulateOptions:
    if args.speedup < 0:
        raise ValueError("--speedup must be >= 0")
    if args.check_period_ms <= 0:
        raise ValueError("--check-period-ms must be > 0")
    clock: TimeProvider = LocalTime()
    if args.clock_offset_ms or args.clock_drift_ppm:
        clock = SkewedTime(clock, int(args.clock_offset_ms * 1e6), args.clock_drift_ppm)
    return SimulateOptions(
        workflow=load_workflow(args.workflow),
        data_dir=args.data,
        sensors=[s.strip() for s in args.sensors.split(",") if s.strip()] if args.sensors else None,
        share=parse_share(args.share) if args.share else None,
        speedup=args.speedup,
        start_at_ms=args.start_at,
        skip_halftime=args.skip_halftime,
        from_ts=args.from_ts,
        to_ts=args.to_ts,
        impair=ImpairProfile.load(args.impair) if args.impair else None,
        clock=clock,
        wtt_master=parse_address(args.wtt_master) if args.wtt_master else None,
        wtt_slave=parse_address(args.wtt_slave, "127.0.0.1") if args.wtt_slave else None,
        wtt_sync_timeout_s=args.wtt_timeout,
        send_log=args.send_log,
        check_period_ms=args.check_period_ms,
        progress=not args.quiet,
        give_up_s=args.give_up_s,
    )
