"""`pan bench fullgame`: the whole pipeline on a generated match, phase by phase: generate, split, replay.

Each repetition runs the three phases as child processes, as a user would type them: `pan generate --full`
(or `--minutes M`) writes the match, `pan split` (Spark) splits it by sensor, and an unpaced `pan replay` of
both halves into ``--workflow`` (default workflows/full_game_3_peers.json, on free ports) records every
output stream, zstd-compressed (`--compress`). Every process of a phase's tree is sampled with psutil every 0.5 s
(`benchmarks/fullgame_measure.py`) and keeps its peak RSS, named from its command line: the generator and its
forked workers; the Spark driver, its JVM and python workers; the replay's driver (simulator and recorder),
launcher, repository and peers.

Per phase: wall time (from starting the process to its exit), input rows per second (the rows of the generated
match, counted in its CSV, over the wall time), multiple of real time (game time over wall time: a whole match
is its two halves, ``--minutes M`` is M minutes), peak RSS per process and of the whole tree at one sample; for
the replay the bytes recorded per stream family and in all, on disk (the replay records with `--compress`, zstd)
and as JSON lines before compression, each also per minute of play, and the streams recorded. Every figure is the
median over ``--reps`` with its min-max. Before anything starts, the free space of ``--out`` is checked against an
estimate of what a repetition writes (CSV, split, compressed recording); each repetition removes the last one's
files.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import common
from simulator.disk_space import FreeBytes, free_bytes, room_problem

HELP = "the whole pipeline on a generated match (generate, Spark split, replay): time, rows/s, peak RSS per process"
SECTION = "fullgame"
SEED = 2013
PHASES = ("generate", "split", "replay")
LEAD_S = 5.0  # `pan generate`'s default rows before and after each half's play


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--minutes", type=float, default=None, metavar="M",
                   help="minutes of play, split over both halves (default None: the whole match, "
                        "`pan generate --full`)")
    p.add_argument("--reps", type=int, default=3, metavar="N",
                   help="runs of the whole pipeline; every figure is the median with min-max")
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help="working folder for the match, its split and the recording (default: a temporary folder "
                        "under the current directory); its files are removed at the end unless --keep")
    p.add_argument("--keep", action="store_true", help="keep the last repetition's files (and logs) in the folder")
    p.add_argument("--workflow", type=Path, default=common.REPO_ROOT / "workflows" / "full_game_3_peers.json",
                   help="the workflow the replay runs")
    p.add_argument("--seed", type=int, default=SEED, help="seed of the generated match")
    p.add_argument("--write", "--report", dest="write", type=Path, metavar="PATH",
                   help="update this Markdown report (e.g. docs/benchmarks.md) with the fullgame section")


def game_seconds(minutes: float | None) -> float:
    """Seconds of play: both halves at their real length, or ``minutes``."""
    if minutes is None:
        from simulator.debs import HALF1, HALF2, PS_PER_S

        return ((HALF1[1] - HALF1[0]) + (HALF2[1] - HALF2[0])) / PS_PER_S
    return minutes * 60.0


def run(args: argparse.Namespace, free: FreeBytes = free_bytes) -> int:
    """``free``: the free bytes of a folder (`simulator.disk_space.free_bytes`; tests pass a small disk)."""
    from benchmarks import fullgame_measure as fm
    from benchmarks import fullgame_report

    if args.reps < 1 or (args.minutes is not None and args.minutes <= 0):
        print("pan bench fullgame: --reps must be >= 1 and --minutes > 0", file=sys.stderr)
        return 2
    if not args.workflow.is_file():
        print(f"pan bench fullgame: --workflow {args.workflow}: no such file", file=sys.stderr)
        return 2
    game_s = game_seconds(args.minutes)
    needed = fm.needed_bytes(game_s + 4 * LEAD_S)
    out = (args.out if args.out is not None else Path.cwd()).resolve()
    refusal = room_problem(out, needed, "the run (the generated CSV, its split and the replay's compressed recording)",
                           free)
    if refusal:
        print(f"pan bench fullgame: {refusal}", file=sys.stderr)
        return 2
    from pan.config.specs import WorkflowError

    try:
        streams_expected = expected_streams(args.workflow)
    except WorkflowError as exc:
        print(f"pan bench fullgame: --workflow {args.workflow}: {exc}", file=sys.stderr)
        return 2
    results: dict[str, Any] = {
        **common.run_header(SECTION),
        "config": {"minutes": args.minutes, "whole_match": args.minutes is None, "game_s": round(game_s, 3),
                   "seed": args.seed, "reps": args.reps, "workflow": workflow_name(args.workflow),
                   "sample_s": fm.SAMPLE_S, "disk_needed_gb": round(needed / 1e9, 2)},
        "streams_expected": streams_expected,
        "runs": [],
    }
    made = args.out is None or not args.out.exists()
    work = Path(tempfile.mkdtemp(prefix="pan-fullgame-", dir=Path.cwd())) if args.out is None else out
    work.mkdir(parents=True, exist_ok=True)
    try:
        for rep in range(args.reps):
            clear(work)
            one = fm_run(args, work, game_s)
            results["runs"].append(one)
            print(progress(rep, args.reps, one), file=sys.stderr, flush=True)
    except fm.PhaseFailed as exc:
        print(f"pan bench fullgame: {exc}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            clear(work)
            if made:
                shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept the last repetition's files in {work}", file=sys.stderr)
    results["phases"] = fullgame_report.summarize(results["runs"])
    results["load_avg_at_end"] = common.machine()["load_avg"]
    common.publish(results, args.write, SECTION, lambda: fullgame_report.report(results))
    return 0


def fm_run(args: argparse.Namespace, work: Path, game_s: float) -> dict[str, Any]:
    """One repetition: the three phases in turn, each with its figures."""
    import orjson

    from benchmarks import fullgame_measure as fm

    pan = [sys.executable, "-m", "pan"]
    game, split, record, logs = work / "game", work / "split", work / "record", work / "logs"
    length = ["--full"] if args.minutes is None else ["--minutes", f"{args.minutes:g}"]
    phases: dict[str, dict[str, Any]] = {}
    phases["generate"] = fm.run_phase(
        [*pan, "generate", *length, "--seed", str(args.seed), "--out", str(game)], logs / "generate.log")
    rows = common.count_lines(game / "full-game")
    phases["split"] = fm.run_phase([*pan, "split", str(game / "full-game"), "--out", str(split)], logs / "split.log")
    manifest = orjson.loads((split / "manifest.json").read_bytes())
    phases["split"]["rows_written"] = manifest["rows"]
    # exit 1: some stream missed tuples; still a measurement, and its streams are reported
    replay = fm.run_phase(
        [*pan, "replay", str(args.workflow), "--data", str(split), "--record", str(record), "--speedup", "0",
         "--free-ports", "--compress", "--json"], logs / "replay.log", ok_codes=(0, 1))
    summary = orjson.loads(replay["stdout"])
    replay.update({"rows_fed": summary["sent"], "tuples": summary["tuples"], "feed_s": summary["feed_s"],
                   "recorded_s": summary["recorded_s"], "missed": summary["missed"],
                   "recording": fm.recording_sizes(record, summary["json_bytes"], game_s / 60)})
    phases["replay"] = replay
    for phase in phases.values():
        phase.pop("stdout", None)
        wall = phase["wall_s"]
        phase["rows_per_s"] = round(rows / wall, 1) if wall > 0 else None
        phase["real_time_multiple"] = round(game_s / wall, 3) if wall > 0 else None
    return {"rows": rows, "load_avg": common.machine()["load_avg"], "phases": phases}


def progress(rep: int, reps: int, one: dict[str, Any]) -> str:
    parts = [f"{name} {p['wall_s']:.1f} s ({p['real_time_multiple']:g}x real time, peak RSS "
             f"{max((q['peak_rss_mb'] for q in p['processes'].values()), default=0):,.0f} MB)"
             for name, p in one["phases"].items()]
    recording = one["phases"]["replay"]["recording"]
    return (f"fullgame {rep + 1}/{reps}: {one['rows']:,} rows; " + ", ".join(parts)
            + f"; recorded {recording['bytes'] / 1e6:,.0f} MB compressed ({recording['json_bytes'] / 1e6:,.0f} MB of "
              f"JSON) on {recording['streams']} streams")


def clear(work: Path) -> None:
    """Remove what a repetition writes into ``work`` (and nothing else of the folder)."""
    for name in ("game", "split", "record", "logs"):
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(work / name)


def expected_streams(workflow: Path) -> int:
    """Output streams of the workflow: what the replay records (`simulator.replay.output_streams`)."""
    from pan.workflow.parser import load_workflow
    from simulator.replay import output_streams

    return len(output_streams(load_workflow(workflow)))


def workflow_name(workflow: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(workflow.resolve().relative_to(common.REPO_ROOT))
    return str(workflow)
