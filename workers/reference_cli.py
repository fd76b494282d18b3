"""`pan reference`: the Spark batch reference of the player averages and Q1 to Q4.

Spark is imported only when the job runs, so the rest of the CLI stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from workers.reference_q2_interruptions import HEARTBEAT_MS


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "reference", help="batch reference of Q1 to Q4 (Spark), recorded like `pan replay --record`",
        description="Compute the player averages, running analysis (Q1), ball possession (Q2: active ball, "
        "ball hits, players' and teams' possession), heat maps (Q3) and shots on goal (Q4) of a `pan split` "
        "folder in batch and write OUTDIR/<stream>.jsonl in the recorder's format.",
    )
    p.add_argument("--data", required=True, type=Path, help="`pan split` folder (SENSOR<sid>.csv)")
    p.add_argument("--out", required=True, type=Path, help="folder for <stream>.jsonl (shared by all executors)")
    p.add_argument("--master", default=None, help="Spark master URL (default: embedded local[*])")
    p.add_argument("--driver-memory", default=None, help="Spark driver memory, e.g. 2g")
    p.add_argument("--agg-period-ms", type=int, default=20, help="the running workers' agg_period_ms (default 20)")
    p.add_argument("--heartbeat-ms", type=int, default=HEARTBEAT_MS,
                   help=f"period of the INTERRUPTIONS heartbeats `pan simulate` feeds "
                   f"(default {HEARTBEAT_MS}; 0: none)")
    p.set_defaults(handler=cmd_reference)


def cmd_reference(args: argparse.Namespace) -> int:
    from pan.offline.spark import SparkUnavailable, get_session
    from workers.reference import run_reference

    if not args.data.is_dir():
        print(f"pan reference: {args.data} is not a folder", file=sys.stderr)
        return 2
    if args.agg_period_ms < 20 or args.agg_period_ms % 20:
        print("pan reference: --agg-period-ms must be a positive multiple of 20", file=sys.stderr)
        return 2
    if args.heartbeat_ms < 0:
        print("pan reference: --heartbeat-ms must be 0 or more", file=sys.stderr)
        return 2
    try:
        spark = get_session(args.master, "pan-reference", args.driver_memory)
        summary = run_reference(spark, args.data, args.out, agg_period_ms=args.agg_period_ms,
                                heartbeat_ms=args.heartbeat_ms)
    except (SparkUnavailable, FileNotFoundError, ValueError) as exc:
        print(f"pan reference: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary))
    return 0
