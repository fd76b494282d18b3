"""`pan split`: a full-game DEBS CSV into one sorted file per sensor, the simulator's input (Spark).

Spark is imported only when a job runs, so the rest of the CLI stays fast
and works without Java.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("split", help="split a full-game CSV into one file per sensor (Spark)")
    p.add_argument("input", help="full-game CSV (DEBS row format)")
    p.add_argument("--out", required=True, help="output folder for SENSOR<sid>.csv and manifest.json")
    p.add_argument("--master", default=None, help="Spark master URL (default: embedded local[*])")
    p.add_argument("--driver-memory", default=None, help="Spark driver memory, e.g. 2g")
    p.set_defaults(handler=cmd_split)


#: How the JVM reports ENOSPC in a failed Spark task.
DISK_FULL = "No space left on device"


def cmd_split(args: argparse.Namespace) -> int:
    from pan.offline.spark import SparkUnavailable, interrupt
    from pan.offline.spark_progress import spark_stages
    from simulator.disk_space import SPLIT_FACTOR, is_disk_full, room_problem
    from simulator.split import split

    source = Path(args.input)
    if source.is_file():
        problem = room_problem(Path(args.out), int(source.stat().st_size * SPLIT_FACTOR), "the split")
        if problem is not None:
            print(f"pan split: {problem}", file=sys.stderr)
            return 2
    signal.signal(signal.SIGTERM, interrupt)  # a stop from outside cleans up as Ctrl-C does
    try:
        with spark_stages("split"):
            manifest = split(args.input, args.out, master=args.master, driver_memory=args.driver_memory)
    except (SparkUnavailable, FileNotFoundError) as exc:
        print(f"pan split: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"pan split: interrupted; removed the partial split from {args.out}", file=sys.stderr)
        return 130
    except Exception as exc:  # a full disk comes as an OSError here, or as a Spark task's Java exception
        if not (isinstance(exc, OSError) and is_disk_full(exc)) and DISK_FULL not in str(exc):
            raise
        print(f"pan split: the disk filled up; removed the partial split from {args.out}", file=sys.stderr)
        return 1
    summary = {k: manifest[k] for k in ("rows", "rejected", "seconds")}
    summary["sensors"] = len(manifest["sensors"])
    print(json.dumps(summary))
    return 0
