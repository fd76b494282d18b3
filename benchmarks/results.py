"""Figures a reader can check: raw results files, a load gate before writing, and side-by-side comparison.

Every ``pan bench X --write docs/benchmarks.md`` also keeps its full JSON
(the same object it prints) in ``docs/results/<section>.json``, so the medians
in the report can be recomputed from the samples, and so a user can run the
same command on their own machine and compare the two files with
``pan bench compare``. A report written on a busy machine is not comparable
with anything, so ``--write`` is refused while the load average is above
``--max-load``.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

#: Lists of more numbers than this are raw samples: `compare` shows their median, not every element.
SAMPLES_FROM = 12
#: Keys `compare` leaves out of the table: they describe the run, not its figures (shown above the table).
CONTEXT_KEYS = {"machine", "date", "command", "benchmark", "config", "load_avg_at_end"}
ENV_MAX_LOAD = "PAN_BENCH_MAX_LOAD"


# --- the load gate ----------------------------------------------------------------------


def default_max_load() -> float:
    """$PAN_BENCH_MAX_LOAD, else the number of cores: above it, runnable tasks outnumber the cores."""
    text = os.environ.get(ENV_MAX_LOAD)
    if text:
        try:
            return float(text)
        except ValueError:
            pass  # a typo in the variable falls back to the safe default; argparse reports bad flags
    return float(os.cpu_count() or 1)


def add_max_load_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-load", type=float, default=None, metavar="L",
                   help="refuse --write when the 1-minute load average at the start is above L (default: the number "
                        f"of cores, or ${ENV_MAX_LOAD}; 'inf' writes at any load)")


_load_at_start: list[float] = []


def note_load_at_start() -> list[float]:
    """The load average as the benchmark starts, for results that do not record it themselves."""
    _load_at_start[:] = [round(x, 2) for x in os.getloadavg()]
    return list(_load_at_start)


def load_at_start() -> list[float] | None:
    return list(_load_at_start) or None


def load_refusal(write: Any, max_load: float | None, load_1min: float | None = None) -> str | None:
    """Why ``--write`` must not go ahead now, or None. ``load_1min`` defaults to this machine's."""
    if not write:
        return None
    limit = default_max_load() if max_load is None else max_load
    load = (load_at_start() or list(os.getloadavg()))[0] if load_1min is None else load_1min
    if load <= limit:
        return None
    return (f"the load average is {load:.2f}, above {limit:g}: figures measured now would not compare with others, "
            f"so --write is refused; wait until the machine is quieter, or pass --max-load {math.ceil(load + 1)} "
            "(the report records the load either way)")


# --- raw results files ------------------------------------------------------------------


def results_path(report: Path, section: str) -> Path:
    """``docs/results/<section>.json`` beside ``docs/benchmarks.md``."""
    return report.parent / "results" / f"{section}.json"


def dumps(results: Any) -> bytes:
    options = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
    return orjson.dumps(results, option=options, default=str)


def write_results(report: Path, section: str, results: Any, header: dict[str, Any]) -> Path:
    """The printed results, wrapped in ``header`` (`common.run_header`: when, how and on what they were measured)
    with the load average at start and end."""
    header["machine"]["load_avg"] = load_at_start() or header["machine"]["load_avg"]
    path = results_path(report, section)
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = {**header, "load_avg_at_end": [round(x, 2) for x in os.getloadavg()], "results": results}
    path.write_bytes(dumps(kept) + b"\n")
    return path


def unwrapped(kept: Any) -> Any:
    """The results inside a kept file; printed results are already bare."""
    if isinstance(kept, dict) and "results" in kept and "benchmark" in kept:
        return kept["results"]
    return kept


# --- pan bench compare ------------------------------------------------------------------


def figures(value: Any, path: str = "") -> Iterator[tuple[str, float]]:
    """Every number in a results object by its path (``a.b[2].c``); long number lists as their median."""
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int | float):
        if math.isfinite(value):
            yield path, float(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            if not path and key in CONTEXT_KEYS:
                continue
            yield from figures(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        numbers = [v for v in value if isinstance(v, int | float) and not isinstance(v, bool)]
        if len(value) > SAMPLES_FROM and len(numbers) == len(value):
            yield f"{path} (median of {len(value)})", float(statistics.median(numbers))
        else:
            for i, item in enumerate(value):
                yield from figures(item, f"{path}[{i}]")


def compare(a: Any, b: Any) -> dict[str, Any]:
    """The figures both files have, with B / A; and how many each has alone."""
    fa, fb = dict(figures(unwrapped(a))), dict(figures(unwrapped(b)))
    rows = [{"figure": key, "a": fa[key], "b": fb[key], "ratio": (fb[key] / fa[key]) if fa[key] else None}
            for key in fa if key in fb]
    return {"rows": rows, "only_a": sorted(set(fa) - set(fb)), "only_b": sorted(set(fb) - set(fa))}


def describe(name: str, results: Any) -> str:
    """One line on where a results file comes from."""
    if not isinstance(results, dict):
        return f"{name}: no run details"
    m = results.get("machine") or {}
    parts = [results.get("benchmark") or "", results.get("date") or "",
             f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores" if m else "",
             f"load {m.get('load_avg')} at start" if m.get("load_avg") else "",
             f"{results.get('load_avg_at_end')} at end" if results.get("load_avg_at_end") else ""]
    return f"{name}: " + ", ".join(p for p in parts if p)


def number(value: float) -> str:
    return f"{value:.4g}" if abs(value) < 1e6 else f"{value:,.0f}"


def render(a_name: str, a: Any, b_name: str, b: Any, table: dict[str, Any]) -> str:
    width = max([len("figure"), *(len(r["figure"]) for r in table["rows"])])
    lines = [describe(f"A {a_name}", a), describe(f"B {b_name}", b), "",
             f"{'figure':<{width}}  {'A':>12}  {'B':>12}  {'B / A':>7}"]
    for r in table["rows"]:
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        lines.append(f"{r['figure']:<{width}}  {number(r['a']):>12}  {number(r['b']):>12}  {ratio:>7}")
    for side, names in (("A", table["only_a"]), ("B", table["only_b"])):
        if names:
            lines.append(f"only in {side}: {len(names)} figure(s), e.g. {', '.join(names[:3])}")
    return "\n".join(lines)


def load_results(path: str) -> Any:
    try:
        return orjson.loads(Path(path).read_bytes())
    except OSError as e:
        raise SystemExit(f"pan bench compare: {path}: {e.strerror or e}") from None
    except orjson.JSONDecodeError as e:
        raise SystemExit(f"pan bench compare: {path}: not a JSON results file ({e})") from None


def add_compare_parser(benches: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = benches.add_parser(
        "compare", help="two results files side by side, with ratios (a kept one from docs/results/ and your own run)",
        description="Print every figure the two results files share, A, B and B / A. A results file is what "
                    "`pan bench X` prints, or what `--write` keeps in docs/results/.")
    p.add_argument("a", metavar="A.json")
    p.add_argument("b", metavar="B.json")
    p.add_argument("--json", action="store_true", help="the comparison as JSON instead of a table")
    p.set_defaults(handler=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    a, b = load_results(args.a), load_results(args.b)
    table = compare(a, b)
    if not table["rows"]:
        print(f"pan bench compare: {args.a} and {args.b} share no figure (results of different benchmarks?)",
              file=sys.stderr)
        return 1
    print(dumps(table).decode() if args.json else render(args.a, a, args.b, b, table))
    return 0
