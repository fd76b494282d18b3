"""`pan bench arrays`: where a table of row ids is faster on the array path than event by event.

A component with column inputs (player averages, the active ball) gets each
release of row ids as one int64 table (pan/buffers/row_store.py). It computes on the
table (``_process_table``) when the table has at least ``MIN_ARRAY_ROWS``
rows, and otherwise event by event on dicts made from the table (what
``ArrayPath._process_rows`` does below the threshold): numpy's cost per call
is paid per batch, the row loop's per row. This benchmark times both on the
rows of a generated match, cut into batches of each size, and reports the
time per row of each, their ratio, and the smallest size from which the
array path is faster; the threshold in the code should be near it. The
components' buffers are frozen for the garbage collector while timed, as a
peer freezes its workers' (``pan/worker/peer.py``).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import common

HELP = "time per row of the array path and of the row loop on tables of row ids, by batch size"
SECTION = "arrays-bench"
SIZES = (16, 64, 128, 256, 512, 1024, 4096)
ROWS = 40_000  # rows per component and run
#: The components with column inputs, with their params (as in the full-game workflow).
COMPONENTS: dict[str, dict[str, Any]] = {
    "player_average": {"players": ["A1", "A2", "A3", "A4", "B1", "B2", "B3", "B4"]},
    "active_ball": {},
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--reps", type=int, default=5, help="repetitions (the median is reported)")
    p.add_argument("--quick", action="store_true", help="20 s of match instead of 1 min")
    p.add_argument("--write", metavar="PATH", help="write/update the arrays section of this Markdown file")


def input_rows(type_name: str, params: dict[str, Any], rows: np.ndarray) -> np.ndarray:
    """The component's input rows in ts order (its sensors', from the first half's kick-off)."""
    from pan.components.catalog import get_component_type
    from pan.config.specs import WorkerSpec
    from workers import debs

    kind = get_component_type(type_name)
    assert kind is not None
    spec = WorkerSpec(name="bench", type=type_name, host="127.0.0.1", port=1, peer="p", params=dict(params))
    sids = [int(name.removeprefix("SENSOR")) for name in kind.input_names(spec)]
    mine = rows[np.isin(rows[:, 0], sids) & (rows[:, 1] >= debs.FIRST_HALF[0])]
    return mine[np.argsort(mine[:, 1], kind="stable")][:ROWS]


def time_paths(type_name: str, params: dict[str, Any], rows: np.ndarray, size: int) -> tuple[float, float]:
    """Seconds per row of the array path and of the row loop, the rows in batches of ``size``."""
    from pan.components.testing import build_component
    from simulator.debs_rows import SENSOR_FIELDS

    on_arrays = build_component(type_name, {**params, "arrays": True})
    per_event = build_component(type_name, {**params, "arrays": False})
    table = rows[:, [SENSOR_FIELDS.index(field) for field in on_arrays.ROW_FIELDS]]
    names = per_event.ROW_FIELDS
    gc.collect()
    gc.freeze()  # as a peer does once its workers run (pan/worker/peer.py): the collector never walks their buffers
    try:
        started = time.perf_counter()
        for k in range(0, len(table), size):
            on_arrays._process_table(table[k:k + size])
        arrays_s = time.perf_counter() - started
        started = time.perf_counter()
        for k in range(0, len(table), size):
            per_event._process_events([dict(zip(names, row, strict=True)) for row in table[k:k + size].tolist()])
        events_s = time.perf_counter() - started
    finally:
        gc.unfreeze()
    return arrays_s / len(table), events_s / len(table)


def run(args: argparse.Namespace) -> int:
    if args.reps < 1:
        print("pan bench arrays: --reps must be >= 1", file=sys.stderr)
        return 2
    from pan.components.catalog import get_component_type
    from simulator.match import generate

    minutes = 20 / 60 if args.quick else 1.0
    results: dict[str, Any] = {**common.run_header("arrays"),
                               "config": {"minutes": round(minutes, 3), "rows": ROWS, "reps": args.reps,
                                          "sizes": list(SIZES)}, "components": {}}
    with tempfile.TemporaryDirectory(prefix="pan-arrays-bench-") as tmp:
        generate(Path(tmp) / "game", minutes, seed=2013)
        rows = np.loadtxt(Path(tmp) / "game" / "full-game", delimiter=",", dtype=np.int64)
    for type_name, params in COMPONENTS.items():
        mine = input_rows(type_name, params, rows)
        by_size = {}
        for size in SIZES:
            runs = [time_paths(type_name, params, mine, size) for _ in range(args.reps)]
            arrays = [r[0] * 1e6 for r in runs]
            events = [r[1] * 1e6 for r in runs]
            by_size[size] = {"arrays_us": round(statistics.median(arrays), 3), "arrays_spread": spread(arrays),
                             "events_us": round(statistics.median(events), 3), "events_spread": spread(events)}
            print(f"{type_name} batches of {size}: arrays {by_size[size]['arrays_us']:.2f} us/row, event by event "
                  f"{by_size[size]['events_us']:.2f} us/row", file=sys.stderr, flush=True)
        faster = [size for size, s in by_size.items() if s["arrays_us"] < s["events_us"]]
        kind = get_component_type(type_name)
        results["components"][type_name] = {"rows": len(mine), "by_size": by_size,
                                             "arrays_faster_from": min(faster) if faster else None,
                                             "min_array_rows": getattr(kind, "MIN_ARRAY_ROWS", None)}
    results["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    common.publish(results, args.write, SECTION, lambda: report(results))
    return 0


def spread(values: list[float]) -> list[float]:
    return [round(min(values), 3), round(max(values), 3)]


def report(results: dict[str, Any]) -> str:
    config = results["config"]
    rows = []
    for type_name, entry in results["components"].items():
        for size, s in entry["by_size"].items():
            rows.append([f"`{type_name}`", size, f"{s['arrays_us']:.2f}",
                         f"{s['arrays_spread'][0]:.2f} - {s['arrays_spread'][1]:.2f}", f"{s['events_us']:.2f}",
                         f"{s['events_spread'][0]:.2f} - {s['events_spread'][1]:.2f}",
                         f"{s['events_us'] / s['arrays_us']:.2f}x"])
    thresholds = "; ".join(
        f"`{name}`: the array path is faster from {entry['arrays_faster_from']} rows on, `MIN_ARRAY_ROWS` is "
        f"{entry['min_array_rows']}" for name, entry in results["components"].items())
    return "\n".join([
        *common.report_head("## Array path against the row loop, by batch size (column inputs)", results),
        "",
        f"Command: `{results['command']}`; {config['minutes'] * 60:.0f} s of a generated match, up to "
        f"{config['rows']:,} input rows per component from the kick-off, in batches of each size; medians of "
        f"{config['reps']} runs with min - max. Array path: `_process_table` on the int64 table; event by event: "
        "dicts made from the same table, then `_process_events` (what a component does below `MIN_ARRAY_ROWS`). "
        "Speed-up: event by event over arrays.",
        "",
        common.markdown_table(["Component", "Batch rows", "Arrays us/row", "Min - max", "Event by event us/row",
                               "Min - max", "Speed-up of arrays"], rows, "lrrrrrr"),
        "",
        thresholds + ".",
    ]) + "\n"
