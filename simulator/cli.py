"""`pan generate`: write a synthetic match with its ground truth."""

from __future__ import annotations

import argparse

from simulator.match import DEFAULT_LEAD_S, generate


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("generate", help="generate a synthetic DEBS 2013 match with ground truth")
    p.add_argument("--minutes", type=float, default=10.0, help="minutes of play from the first kick-off")
    p.add_argument("--full", action="store_true", help="both halves at real length (about 50 M rows)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--workers", type=int, default=None, help="processes (default: up to 2)")
    p.add_argument("--lead", type=float, default=DEFAULT_LEAD_S, help="seconds of rows before and after play")
    p.set_defaults(handler=cmd_generate)


def cmd_generate(args: argparse.Namespace) -> int:
    if not args.full and args.minutes <= 0:
        print("error: --minutes must be positive")
        return 2
    result = generate(args.out, None if args.full else args.minutes, args.seed, args.workers, args.lead)
    t = result.truth
    print(
        f"wrote {result.rows} rows to {args.out}/full-game in {result.seconds:.1f} s "
        f"({result.rows_per_s:,.0f} rows/s); {len(t.kicks)} kicks, {len(t.shots)} shots, "
        f"{len(t.interruptions)} interruptions"
    )
    return 0
