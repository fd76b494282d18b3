"""`pan stats delays`: offline delay profiles for ordering units (Spark job in ``pan.offline.stats``).

Spark is imported only when the job runs, so the rest of the CLI stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("stats", help="offline statistics (Spark)")
    sub = p.add_subparsers(dest="stats_command", required=True, metavar="STATS")
    d = sub.add_parser(
        "delays",
        help="per-stream delay profile from arrival logs, for initial K",
        description="Read the arrival logs (LOG_DIR/*.csv, written by components with params "
        '"arrival_log") and write a delay profile usable as params "delay_profile".',
    )
    d.add_argument("log_dir", metavar="LOG_DIR", help="folder of arrival logs (arrival_ns,stream,ts)")
    d.add_argument("--out", required=True, type=Path, help="profile JSON to write")
    d.add_argument("--master", default=None, help="Spark master URL (default: embedded local[*])")
    d.add_argument("--clock", nargs="+", metavar="STREAM",
                   help="clock streams of the ordering units (default: every stream of a log)")
    d.set_defaults(handler=cmd_delays)


def cmd_delays(args: argparse.Namespace) -> int:
    from pan.offline.spark import SparkUnavailable, get_session
    from pan.offline.stats import StatsError, delay_profile, find_logs

    try:
        find_logs(args.log_dir)  # fail before starting Spark
        spark = get_session(args.master, "pan-stats-delays")
        profile = delay_profile(spark, args.log_dir, clock=args.clock)
    except (StatsError, SparkUnavailable) as exc:
        print(f"pan stats delays: {exc}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(profile, indent=1) + "\n")
    source = profile["source"]
    if source["malformed"]:
        print(f"pan stats delays: skipped {source['malformed']} malformed line(s), e.g. "
              + "; ".join(source["malformed_examples"][:3]), file=sys.stderr)
    for name, entry in profile["streams"].items():
        print(f"{name}: {entry['count']} delays, max {entry['max_ps'] / 1e9:.3f} ms, "
              f"p99 {entry['p99_ps'] / 1e9:.3f} ms", file=sys.stderr)
    print(json.dumps({"out": str(args.out), "streams": len(profile["streams"]),
                      "unmeasured_streams": sorted(profile["unmeasured_streams"]),
                      "malformed": source["malformed"]}))
    return 0
