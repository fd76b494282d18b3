"""`pan split`: a full-game DEBS CSV into one sorted file per sensor, the simulator's input (Spark).

Spark is imported only when a job runs, so the rest of the CLI stays fast
and works without Java.
"""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("split", help="split a full-game CSV into one file per sensor (Spark)")
    p.add_argument("input", help="full-game CSV (DEBS row format)")
    p.add_argument("--out", required=True, help="output folder for SENSOR<sid>.csv and manifest.json")
    p.add_argument("--master", default=None, help="Spark master URL (default: embedded local[*])")
    p.add_argument("--driver-memory", default=None, help="Spark driver memory, e.g. 2g")
    p.set_defaults(handler=cmd_split)


def cmd_split(args: argparse.Namespace) -> int:
    from pan.offline.spark import SparkUnavailable
    from pan.offline.spark_progress import spark_stages
    from simulator.split import split

    try:
        with spark_stages("split"):
            manifest = split(args.input, args.out, master=args.master, driver_memory=args.driver_memory)
    except (SparkUnavailable, FileNotFoundError) as exc:
        print(f"pan split: {exc}", file=sys.stderr)
        return 2
    summary = {k: manifest[k] for k in ("rows", "rejected", "seconds")}
    summary["sensors"] = len(manifest["sensors"])
    print(json.dumps(summary))
    return 0
