"""Issue 3 benchmarks: generator rows/s, and Spark split vs a plain Python line splitter.

Each repeat generates a match with `pan generate`, splits it with `pan split`
(Spark, embedded local[*]), and splits the same file with the seed prototype's
method in one Python thread: read line by line, append each line to its
sensor's file, then sort every file by ts.  Both splits must agree byte for
byte.  Medians over the repeats; the machine and the exact command are
recorded.  Usage:

    pan bench simulation [--minutes 10] [--reps 3] [--full] [--write docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import common
from pan.launch.lifeline import shared_lifeline

HELP = "`pan generate` rows/s, and the Spark split against a plain Python line splitter (issue 3)"
SECTION = "simulation-bench"


def pan(*args: str) -> float:
    """Run a `pan` subcommand; wall seconds (start-up included: that is what a user waits for)."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pan", *args], cwd=common.REPO_ROOT, check=True, stdout=subprocess.DEVNULL,
                   **shared_lifeline().spawn_options())  # dies with the benchmark, even on SIGKILL
    return time.perf_counter() - started


def python_split(source: Path, out: Path) -> float:
    """The prototype's way, single-threaded: append per sensor, then sort each file by ts."""
    started = time.perf_counter()
    out.mkdir(parents=True)
    files = {}
    with source.open("rb") as f:
        for line in f:
            sid = line[: line.index(b",")]
            handle = files.get(sid)
            if handle is None:
                handle = files[sid] = (out / f"SENSOR{sid.decode()}.csv").open("wb")
            handle.write(line)
    for handle in files.values():
        handle.close()
    for path in out.glob("SENSOR*.csv"):
        lines = path.read_bytes().splitlines(keepends=True)
        lines.sort(key=lambda row: int(row.split(b",", 2)[1]))
        path.write_bytes(b"".join(lines))
    return time.perf_counter() - started


def same_split(a: Path, b: Path) -> bool:
    names = sorted(p.name for p in a.glob("SENSOR*.csv"))
    if names != sorted(p.name for p in b.glob("SENSOR*.csv")):
        return False
    return all((a / n).read_bytes() == (b / n).read_bytes() for n in names)


def measure(minutes: float | None, full: bool, repeats: int, workdir: Path) -> dict[str, Any]:
    size = ["--full"] if full else ["--minutes", str(minutes)]
    gen, spark, py, rows, agree = [], [], [], 0, True
    for i in range(repeats):
        match, split_dir, py_dir = workdir / f"match{i}", workdir / f"spark{i}", workdir / f"py{i}"
        gen.append(pan("generate", *size, "--seed", "7", "--out", str(match)))
        rows = common.count_lines(match / "full-game")
        spark.append(pan("split", str(match / "full-game"), "--out", str(split_dir)))
        py.append(python_split(match / "full-game", py_dir))
        agree = agree and same_split(split_dir, py_dir)
        for d in (match, split_dir, py_dir):
            shutil.rmtree(d)
        print(f"repeat {i + 1}: {rows} rows, generate {gen[-1]:.1f} s, spark split {spark[-1]:.1f} s, "
              f"python split {py[-1]:.1f} s", file=sys.stderr, flush=True)
    g, s, p = statistics.median(gen), statistics.median(spark), statistics.median(py)
    return {"size": "--full" if full else f"--minutes {minutes}", "rows": rows, "repeats": repeats,
            "generate_s": g, "spark_s": s, "python_s": p, "agree": agree}


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| Match | Rows | Generate (rows/s) | Spark split (rows/s) | Python line splitter (rows/s) "
             "| Spark speed / Python speed | Repeats | Outputs identical |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        n = r["rows"]  # rows of the match file (the generator adds lead-in/out rows around play)
        lines.append(
            f"| `{r['size']}` | {n:,} | {n / r['generate_s']:,.0f} ({r['generate_s']:.1f} s) "
            f"| {n / r['spark_s']:,.0f} ({r['spark_s']:.1f} s) | {n / r['python_s']:,.0f} ({r['python_s']:.1f} s) "
            f"| {r['python_s'] / r['spark_s']:.2f}x | {r['repeats']} | {'yes' if r['agree'] else 'NO'} |")
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--minutes", nargs="+", default=["10"], metavar="M[:REPEATS]",
                   help="match lengths to measure, each optionally with its own repeat count")
    p.add_argument("--reps", "--repeats", dest="reps", type=int, default=3, help="default repeats per match length")
    p.add_argument("--full", action="store_true", help="also a full-length match (~49.5 M rows), once")
    p.add_argument("--workdir", type=Path, help="scratch folder (default: a temporary one)")
    p.add_argument("--write", metavar="PATH", help="update this Markdown report (e.g. docs/benchmarks.md)")
    p.add_argument("--write-docs", dest="write", action="store_const", const=str(common.REPO_ROOT / "docs" /
                   "benchmarks.md"), help="the same as --write docs/benchmarks.md")


def run(args: argparse.Namespace) -> int:
    results: dict[str, Any] = {**common.run_header("simulation"), "sizes": []}
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        for spec in args.minutes:
            minutes, _, repeats = spec.partition(":")
            results["sizes"].append(measure(float(minutes), False, int(repeats or args.reps), Path(tmp)))
        if args.full:
            results["sizes"].append(measure(None, True, 1, Path(tmp)))
    results["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    common.publish(results, args.write, SECTION, lambda: report(results))
    return 0


def report(results: dict[str, Any]) -> str:
    return "\n".join([
        *common.report_head("## Simulation environment (issue 3)", results),
        f"Command: `{results['command']}`. Times are wall seconds, medians over the repeats. The `pan generate` and "
        "`pan split` times include process start-up and, for Spark, the JVM start. The Python splitter is "
        "the seed prototype's method in one thread: append each line to its sensor's file, then sort "
        "every file by ts. Its output is compared byte for byte with Spark's.",
        "",
        table(results["sizes"]),
    ])
