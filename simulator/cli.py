"""`pan generate`: write a synthetic match with its ground truth.

The default is the realistic generator (``simulator.realistic``: both halves,
ball physics, sensor noise, dropouts, the first-half ball-data gap);
``--exact`` keeps the earlier noise-free generator (``simulator.match``) for
unit tests whose checks need exact values.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pan.util import console
from simulator import realistic
from simulator.disk_space import generated_bytes, is_disk_full, room_problem
from simulator.match import DEFAULT_LEAD_S, HALF1_S, HALF2_S, generate


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("generate", help="generate a synthetic DEBS 2013 match with ground truth")
    p.add_argument("--minutes", type=float, default=10.0, help="minutes of play (realistic: split over both halves)")
    p.add_argument("--full", action="store_true", help="both halves at real length (about 50 M rows)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--workers", type=int, default=None, help="processes (default: up to 2)")
    p.add_argument("--lead", type=float, default=DEFAULT_LEAD_S, help="seconds of rows before and after play")
    p.add_argument("--exact", action="store_true",
                   help="the exact, noise-free generator (first half first, exact positions) for unit tests")
    p.set_defaults(handler=cmd_generate)


def cmd_generate(args: argparse.Namespace) -> int:
    if not args.full and args.minutes <= 0:
        print("error: --minutes must be positive")
        return 2
    minutes = None if args.full else args.minutes
    play_s = HALF1_S + HALF2_S if minutes is None else minutes * 60.0
    problem = room_problem(Path(args.out), generated_bytes(play_s + 4 * args.lead), "the match's CSV")
    if problem is not None:
        print(f"pan generate: {problem}", file=sys.stderr)
        return 2
    try:
        return _generate(args, minutes)
    except KeyboardInterrupt:
        return _gave_up(args.out, "interrupted", 130)
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        return _gave_up(args.out, f"the disk filled up ({exc.strerror})", 1)


def _gave_up(out: str, why: str, code: int) -> int:
    """Remove the partial CSV (a truncated match is of no use) and say so in one line."""
    partial = Path(out) / "full-game"
    partial.unlink(missing_ok=True)
    print(f"pan generate: {why}; removed the partial {partial}", file=sys.stderr)
    return code


def _generate(args: argparse.Namespace, minutes: float | None) -> int:
    if args.exact:
        result = generate(args.out, minutes, args.seed, args.workers, args.lead)
        t = result.truth
        detail = f"{len(t.kicks)} kicks, {len(t.shots)} shots, {len(t.interruptions)} interruptions"
    else:
        with console.progress_bar("generate", None, unit="slices") as bar:
            real = realistic.generate(args.out, minutes, args.seed, args.workers, args.lead,
                                      on_slice=lambda done, total: bar.update(done, total=total))
        s = real.truth.summary()
        result = real  # type: ignore[assignment]
        detail = (f"{s['kicks']} kicks ({s['ambiguous']} ambiguous), {s['shots']} shots, "
                  f"{s['near_misses']} near misses, {s['interruptions']} interruptions")
    print(
        f"wrote {result.rows} rows to {args.out}/full-game in {result.seconds:.1f} s "
        f"({result.rows_per_s:,.0f} rows/s); {detail}"
    )
    return 0
