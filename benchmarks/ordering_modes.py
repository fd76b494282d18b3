"""`pan bench ordering-modes`: K over time and late events, watermark against max (clock-stream) ordering.

A generated match is replayed in real time into the full-game workflow in
both ordering modes (``full_game_3_peers.json`` and its ``_max`` twin), with
an impairment profile of jitter, reordering, loss and drop outages on balls
and players (``workflows/impair_outages.json``). While it runs, every ordered
worker's ``/streams`` is read every 0.1 s: the unit's K, clk (event time),
events pushed and late events. Reported per mode, as medians of the
repetitions with their spread: the late fraction, K, and K one K window (the
unit's ``window`` of measurements) after each reconnect against K just before
the outage.

The replay and its sampling (benchmarks/ordering_modes_replay.py) and the
outage bookkeeping (benchmarks/ordering_modes_recovery.py) are shared with the
acceptance tests (``tests/bench/test_ordering_modes.py``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from benchmarks import common
from benchmarks.ordering_modes_recovery import outage_windows
from benchmarks.ordering_modes_replay import IMPAIR, WORKFLOWS, Run, moved, replay_sampled
from benchmarks.ordering_modes_report import SECTION, kseries, plot, report
from benchmarks.ordering_modes_summary import median_run, summarize
from pan.util import eventloop

HELP = "K over time and late fraction of watermark vs max ordering, replaying with jitter, loss and drop outages"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--minutes", type=float, default=1.0,
                   help="minutes of play replayed: the first half of a generated match (seed 2013)")
    p.add_argument("--data", type=Path, help="a `pan split` folder to use instead of generating one")
    p.add_argument("--reps", type=int, default=5, help="replays per mode (medians and spread are reported)")
    p.add_argument("--speedup", type=float, default=1.0, help="event-time factor of the replay (1 = real time)")
    p.add_argument("--impair", type=Path, default=IMPAIR, help="impairment profile")
    p.add_argument("--quick", action="store_true", help="20 s of match, one replay per mode")
    p.add_argument("--write", type=Path, help="update this markdown report (e.g. docs/ordering.md); "
                   "its plot goes to img/ beside it")


def first_half(game: Path, out: Path) -> Path:
    """A generated match's first half as a split folder (without Spark).

    The profile's outage windows are seconds after the first row: with one half
    they are event seconds too, and no half-time jump (nearly half an hour of
    game time at once for a short match) loads the machine in the middle.
    """
    from benchmarks.query_delay import plain_split
    from simulator.debs import HALF1

    return plain_split(game, out, until_ts=HALF1[1])


def prepare_data(args: argparse.Namespace, work: Path, quick_s: float = 20) -> Path:
    """A split folder: given, or the first half of a generated realistic match (``quick_s`` of play with
    ``--quick``, else ``--minutes``)."""
    if args.data is not None:
        from benchmarks.query_delay import given_split

        return given_split(Path(args.data))
    from simulator.realistic import generate

    generate(work / "game", 2 * (quick_s / 60 if args.quick else args.minutes), seed=2013)
    return first_half(work / "game", work / "split")


def run(args: argparse.Namespace) -> int:
    machine = common.machine()
    reps = 1 if args.quick else max(1, args.reps)
    runs: dict[str, list[Run]] = {mode: [] for mode in WORKFLOWS}
    with tempfile.TemporaryDirectory(prefix="pan-ordering-modes-") as tmp:
        work = Path(tmp)
        data = prepare_data(args, work)
        for rep in range(reps):
            for mode, workflow in WORKFLOWS.items():  # interleaved, so load drifts hit both modes alike
                out = work / f"{mode}-{rep}"
                one = eventloop.run(replay_sampled(moved(workflow, work), data, out, mode=mode,
                                                 impair=args.impair, speedup=args.speedup))
                runs[mode].append(one)
                print(f"{mode} #{rep + 1}: late {one.late_fraction():.5f}, {one.elapsed_s:.0f} s, "
                      f"load {one.load_start} -> {one.load_end}", file=sys.stderr, flush=True)
    windows = outage_windows(args.impair)
    summary = {**common.run_header("ordering-modes"),
               "modes": {mode: summarize(rs, windows) for mode, rs in runs.items()}}
    summary["runs"] = {mode: [r.as_dict() for r in rs] for mode, rs in runs.items()}
    common.publish(summary, args.write, SECTION, lambda: report(summary, machine, args, reps),
                   lambda png: plot({mode: kseries(median_run(rs)) for mode, rs in runs.items()}, windows, png))
    return 0
