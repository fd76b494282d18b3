"""Shared helpers of the `pan bench` benchmarks.

Every benchmark reports the same way (machine, date, exact command, medians
and percentiles, a Markdown section between its own markers in
docs/benchmarks.md, PNG plots in docs/img/), so those pieces live here once.
Imports stay light: `pan` imports the bench CLI on every start.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

from pan.launch import processes

REPO_ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"

# --- numbers ----------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..1); NaN for no values."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def median(values: Iterable[float]) -> float:
    data = list(values)
    return statistics.median(data) if data else float("nan")


def summarize_ms(values_ms: Sequence[float]) -> dict[str, Any]:
    """count, p50/p90/p99/max in ms: the shape every delay table uses."""
    if not values_ms:
        return {"count": 0, "p50_ms": None, "p90_ms": None, "p99_ms": None, "max_ms": None}
    import numpy as np

    arr = np.asarray(values_ms, dtype=float)
    p50, p90, p99 = np.percentile(arr, [50, 90, 99])
    return {
        "count": len(values_ms),
        "p50_ms": round(float(p50), 3),
        "p90_ms": round(float(p90), 3),
        "p99_ms": round(float(p99), 3),
        "max_ms": round(float(arr.max()), 3),
    }


DELAY_QUANTILES = ("p50_ms", "p90_ms", "p99_ms", "max_ms")


def combine_delays(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Repetitions of one delay summary (`summarize_ms`, maybe with ``received``): per quantile the median over
    the runs, and the min-max of p50 and p99 over the runs; counts are the fewest of any run."""
    combined: dict[str, Any] = {key: min(r[key] for r in runs) for key in ("count", "received") if key in runs[0]}
    for q in DELAY_QUANTILES:
        values = [r[q] for r in runs if r[q] is not None]
        combined[q] = round(statistics.median(values), 3) if values else None
    for q in ("p50_ms", "p99_ms"):
        values = [r[q] for r in runs if r[q] is not None]
        combined[f"{q}_min"], combined[f"{q}_max"] = (min(values), max(values)) if values else (None, None)
    return combined


def with_spread(s: dict[str, Any], q: str) -> str:
    """A quantile cell of `combine_delays`: the median, and the runs' min-max in brackets when they differ."""
    cell = fmt(s[q])
    low, high = s.get(f"{q}_min"), s.get(f"{q}_max")
    if low is not None and high is not None and low != high:
        cell += f" ({fmt(low)}-{fmt(high)})"
    return cell


def fmt(value: float | None, digits: int = 1) -> str:
    """A table cell: numbers with thousands separators, '-' for missing."""
    if value is None or value != value:  # None or NaN
        return "-"
    if isinstance(value, int) or abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


# --- where and how it ran ---------------------------------------------------------------


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def run_header(benchmark: str) -> dict[str, Any]:
    """What every results file starts with: which benchmark, when, how to rerun it, on what."""
    return {"benchmark": benchmark, "date": utc_now(), "command": command_line(), "machine": machine()}


def machine() -> dict[str, Any]:
    """CPU, cores, RAM, Python and its main libraries, load: what a reader needs to weigh the numbers."""
    import psutil

    model = platform.processor() or "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    freq = psutil.cpu_freq()
    return {
        "cpu": model,
        "cpu_freq_mhz": round(freq.current) if freq else None,
        "cores": os.cpu_count(),
        "ram_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "aiohttp": version("aiohttp"),
        "orjson": version("orjson"),
        "platform": platform.platform(),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }


def machine_line(m: dict[str, Any], load_at_end: Sequence[float] | None = None) -> str:
    line = (
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['ram_gb']} GB RAM, Python {m['python']}, {m['platform']}. "
        f"Load average at start: {', '.join(map(str, m['load_avg']))}"
    )
    if load_at_end is not None:
        line += f", at the end: {', '.join(f'{x:.2f}' for x in load_at_end)}"
    return line + "."


def report_head(title: str, results: dict[str, Any]) -> list[str]:
    """The first lines of a report section: its title, then when and on what it was measured."""
    load_at_end = results.get("load_avg_at_end")
    return [title, "", f"{results['date']}. {machine_line(results['machine'], load_at_end)}"]


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command as typed, with repo-relative paths, so anyone can rerun it."""
    args = list(sys.argv if argv is None else argv)
    if args:
        exe = Path(args[0])
        with contextlib.suppress(ValueError):
            exe = exe.resolve().relative_to(REPO_ROOT)
        args[0] = "pan" if exe.name == "__main__.py" else str(exe)  # `python -m pan` is the `pan` command
    return shlex.join(args)


# --- report files -----------------------------------------------------------------------


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def write_section(path: Path, name: str, body: str) -> None:
    """Replace (or append) the section between ``name``'s markers; other sections are kept."""
    start_mark, end_mark = markers(name)
    section = f"{start_mark}\n{body.rstrip()}\n{end_mark}\n"
    if path.exists():
        text = path.read_text()
        start, end = text.find(start_mark), text.find(end_mark)
        if start >= 0 and end > start:
            text = text[:start] + section + text[end + len(end_mark) :].lstrip("\n")
        else:
            text = text.rstrip("\n") + "\n\n" + section
    else:
        text = "# Benchmarks\n\n" + section
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def image_dir(report: Path) -> Path:
    """docs/img beside docs/benchmarks.md."""
    return report.parent / "img"


def plot_path(report: Path, section: str) -> Path:
    """A section's plot: ``<report dir>/img/<section>.png``, linked from the section as ``img/<section>.png``."""
    return image_dir(report) / f"{section}.png"


def image_link(section: str, alt: str) -> str:
    """The Markdown link, relative to the report, to the section's plot."""
    return f"![{alt}](img/{section}.png)"


def write_report(report: str | Path, section: str, body: str, plot: Callable[[Path], Any] | None = None) -> None:
    """``--write REPORT``: draw the section's plot (``plot(png_path)``) if it has one, then replace its section."""
    path = Path(report).resolve()
    written = [str(path)]
    if plot is not None:
        png = plot_path(path, section)
        plot(png)
        written.append(str(png))
    write_section(path, section, body)
    print(f"wrote {' and '.join(written)}", file=sys.stderr)


def publish(
    results: Any,
    write: str | Path | None,
    section: str,
    render: Callable[[], str],
    plot: Callable[[Path], Any] | None = None,
) -> None:
    """How every benchmark reports: its results as JSON on stdout and, with ``--write``, its report section.

    ``render`` makes the section's Markdown and ``plot`` draws its PNG; both only run with ``--write``, which also
    keeps the JSON in ``docs/results/<section>.json`` (`benchmarks/results.py`).
    """
    from benchmarks import results as results_files

    print(results_files.dumps(results).decode(), flush=True)
    if write:
        write_report(write, section, render(), plot)
        kept = results_files.write_results(Path(write).resolve(), section, results, run_header(section))
        print(f"kept the raw results in {kept}", file=sys.stderr)


PULLS = ("batched", "per_stream")


def comma_choices(text: str, choices: Sequence[str]) -> list[str]:
    """``a,b`` -> those of ``choices``, in that order; anything else is an argparse error, not a traceback."""
    import argparse

    picked = [c.strip().lower() for c in text.split(",") if c.strip()]
    if not picked or any(c not in choices for c in picked) or len(set(picked)) != len(picked):
        raise argparse.ArgumentTypeError(f"expected a comma-separated choice of {', '.join(choices)}, got {text!r}")
    return picked


#: What the two worker pull modes are, for the benchmarks' ``--pulls`` help.
PULLS_HELP = ("batched: a worker's pulls of one publisher in one loop round share a POST /pages; "
              "per_stream: one /data long poll per input")


def parse_pulls(text: str) -> list[str]:
    """``batched,per_stream`` -> the worker pull modes to compare, in that order (an argparse type)."""
    return comma_choices(text, PULLS)


def with_pulls(source: Path, out: Path, pulls: str) -> Path:
    """The workflow ``source`` with its ``pulls`` set (see ``PULLS_HELP``), written to ``out``."""
    import json

    data = json.loads(Path(source).read_text())
    out.write_text(json.dumps({**data, "pulls": pulls}))
    return out


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None) -> str:
    """``align``: one char per column, 'l' or 'r' (default: first left, rest right)."""
    align = align or "l" + "r" * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


# --- system tools -----------------------------------------------------------------------


def ensure_tool(binary: str, apt_package: str) -> str | None:
    """Make ``binary`` available; None when it is, else why not (and how to get it).

    Installs the Debian package when running as root, as the Makefile does;
    never anything else.
    """
    if shutil.which(binary):
        return None
    if os.geteuid() != 0:
        return f"`{binary}` not found; install it with `sudo apt-get install -y {apt_package}`"
    if not shutil.which("apt-get"):
        return f"`{binary}` not found and no apt-get to install package {apt_package}"
    print(f"installing {apt_package} with apt-get ...", file=sys.stderr, flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", apt_package]):
        result = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            return f"`{' '.join(cmd)}` failed: {result.stderr.strip()[-300:]}"
    return None if shutil.which(binary) else f"package {apt_package} installed but `{binary}` is still missing"


# --- child processes --------------------------------------------------------------------


class Child(processes.Child):
    """A benchmark's child process (pan/launch/processes.py), started in the repository root like the benchmark's
    relative paths (workflows/, ``python -m benchmarks.X``) expect."""

    def __init__(self, args: Sequence[str], **options: Any) -> None:
        super().__init__(args, cwd=REPO_ROOT, **options)


kill_leftovers = processes.kill_leftovers


def count_lines(path: Path) -> int:
    """Rows of a CSV file (its newlines, a last line without one counted too), read in blocks."""
    rows, last = 0, b"\n"
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            rows += block.count(b"\n")
            last = block[-1:]
    return rows + (last != b"\n")
