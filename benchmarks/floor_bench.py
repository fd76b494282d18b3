"""`pan bench floor`: the full-game workflow's components in one process, the ceiling for this code here.

Every ordered component of the workflow (all four queries) is chained in one
process by `pan.components.chain` (no network, no ordering units, no recorder) and fed
a split folder's per-sensor files and INTERRUPTIONS stream (with the
simulator's heartbeats) straight from disk, merged by ts a step of event time
at a time. Sensor rows are parsed as blocks into record batches, as a
forwarder's ingest parses them: a component with column inputs takes their
rows as row ids, as from a worker's pulls of Arrow pages, any other one
their tuples. Rows/s = source rows fed / wall time of the run (reading, decoding,
all components). A distributed replay does this work plus the rest (ingest,
serving and pulling pages, ordering, recording), so its rows/s over this
one's is how much of the components' own speed it keeps.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import common, query_delay

HELP = "all four queries' components in one process on a split match, no network: the ceiling in rows/s"
SECTION = "floor-bench"
PS = 10**12
STEP_PS = PS  # event time per step; outputs do not depend on it, only the per-step overhead does
TAKE_ROWS = 1 << 30  # a source hands out every row of a step at once
MAX_ROW_BYTES = 4096
ARRAYS_PARAM = "arrays"  # workers.arrays.PARAM: the components' array path (true) or per-event path (false)
#: the components' paths: each one's default (as the workflow runs), every array path, every per-event path
PATHS: dict[str, bool | None] = {"defaults": None, "arrays": True, "per_event": False}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workflow", default=str(query_delay.ROOT / "workflows" / "full_game_3_peers.json"))
    p.add_argument("--reps", type=int, default=5, help="repetitions (the median is reported)")
    query_delay.add_replay_arguments(p, "20 s of match, no Spark")


def sensor_row(line: bytes) -> dict[str, int]:
    """A CSV sensor row as a component gets it from a forwarder (without its stream index ``i``)."""
    from simulator.debs_rows import SENSOR_FIELDS

    return dict(zip(SENSOR_FIELDS, map(int, line.split(b",")), strict=True))


def sensor_batch(lines: list[bytes]) -> Any:
    """CSV sensor rows as one record batch, parsed as a forwarder's ingest parses a block (``pan.wire.int_csv``):
    a component with column inputs gets its rows as a worker's pulls of Arrow pages give them, any other one
    their tuples (``pan.components.chain``)."""
    import pyarrow as pa

    from pan.wire.int_csv import parse_block
    from simulator.debs_rows import CSV_LAYOUT, SENSOR_FIELDS

    block = parse_block(b"".join(line if line.endswith(b"\n") else line + b"\n" for line in lines), CSV_LAYOUT,
                        MAX_ROW_BYTES)
    if len(block.taken) != len(lines):
        raise ValueError(f"{len(lines) - len(block.taken)} sensor rows are not plain CSV integers")
    return pa.RecordBatch.from_arrays([pa.array(column) for column in block.values.T], names=list(SENSOR_FIELDS))


def json_row(line: bytes) -> dict[str, Any]:
    """A JSON line as a forwarder stores it: without ``stream``."""
    import orjson

    row = orjson.loads(line)
    row.pop("stream", None)
    return row


def stream_reader(json_lines: bool, columns: bool) -> Callable[[list[bytes]], Any]:
    """How a source's lines become what the chain takes: JSON lines and (without pyarrow) CSV rows as tuples,
    CSV rows as a record batch."""
    if json_lines:
        return lambda lines: list(map(json_row, lines))
    return sensor_batch if columns else lambda lines: list(map(sensor_row, lines))


def with_path(workflow: Path, arrays: bool | None) -> Any:
    """``workflow`` loaded, every component that has an ``arrays`` param set to ``arrays`` (None: as written)."""
    from pan.components.catalog import get_component_type
    from pan.workflow.parser import load_workflow

    loaded = load_workflow(workflow)
    if arrays is not None:
        for spec in loaded.workers:
            kind = get_component_type(spec.type)
            if ARRAYS_PARAM in getattr(kind, "own_params", ()):
                spec.params[ARRAYS_PARAM] = arrays
    return loaded


def timed_components(chain: Any, spent: dict[str, float]) -> None:
    """Add each component type's seconds in ``process`` and ``on_release_point`` to ``spent``."""
    for component in chain.components().values():
        kind = component.type_name
        spent.setdefault(kind, 0.0)
        for method in ("process", "on_release_point"):
            inner = getattr(component, method)

            def timed(*args: Any, _inner: Callable[..., Any] = inner, _kind: str = kind) -> Any:
                started = time.perf_counter()
                try:
                    return _inner(*args)
                finally:
                    spent[_kind] += time.perf_counter() - started

            setattr(component, method, timed)


def run_chain(workflow: Path, data: Path, on_step: Callable[[Any], None] | None = None,
              step_ps: int = STEP_PS, arrays: bool | None = None,
              spent: dict[str, float] | None = None) -> tuple[Any, int, float]:
    """Feed ``data`` through ``workflow``'s components in one process: (the chain, rows fed, seconds).

    ``on_step(chain)`` runs after every step of ``step_ps`` event time and after the end (e.g. to collect
    outputs, which must fit in their buffers over one step; not timed apart). ``arrays`` picks the components'
    array (True) or per-event (False) path; None keeps the workflow's choice. ``spent`` gets the seconds
    each component type spends (``timed_components``).
    """
    from pan.components.chain import ComponentChain
    from pan.wire import arrow_pages
    from simulator.simulate import interruptions_source
    from simulator.sources import INTERRUPTIONS_STREAM, RowSource, sensor_files

    chain = ComponentChain(with_path(workflow, arrays))
    if spent is not None:
        timed_components(chain, spent)
    files = sensor_files(data)
    sources: dict[str, RowSource] = {s: RowSource.from_file(s, files[s]) for s in chain.sources if s in files}
    if INTERRUPTIONS_STREAM in chain.sources:
        sources[INTERRUPTIONS_STREAM] = interruptions_source(data)
    columns = arrow_pages.available()  # (without pyarrow every stream goes as tuples)
    decode = {s: stream_reader(src.json_lines, columns) for s, src in sources.items()}
    firsts = [ts for ts in (src.peek_ts() for src in sources.values()) if ts is not None]
    was_enabled = gc.isenabled()
    gc.disable()  # as a peer freezes its buffers: full collections over millions of row dicts would dominate
    started = time.perf_counter()
    try:
        limit = min(firsts, default=0) + step_ps - 1
        while sources:
            batch = {}
            for stream, source in list(sources.items()):
                _ts, lines = source.take(limit, TAKE_ROWS)
                if lines:
                    batch[stream] = decode[stream](lines)
                if source.peek_ts() is None:
                    del sources[stream]
            chain.advance(batch, limit)
            if on_step is not None:
                on_step(chain)
            limit += step_ps
        chain.finish()
        if on_step is not None:
            on_step(chain)
        seconds = time.perf_counter() - started
    finally:
        if was_enabled:
            gc.enable()
    return chain, chain.fed, seconds


def run(args: argparse.Namespace) -> int:
    if args.reps < 1:
        print("pan bench floor: --reps must be >= 1", file=sys.stderr)
        return 2
    results: dict[str, Any] = {
        **common.run_header("floor"),
        "config": {"workflow": Path(args.workflow).name, "match": query_delay.match_text(args), "reps": args.reps,
                   "step_s": STEP_PS / PS},
    }
    with tempfile.TemporaryDirectory(prefix="pan-floor-bench-") as tmp:
        data = query_delay.prepare_data(args, Path(tmp))
        results.update(measure(Path(args.workflow), data, args.reps, tuple(PATHS)))
    results["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    common.publish(results, args.write, SECTION, lambda: report(results))
    return 0


def measure(workflow: Path, data: Path, reps: int, paths: tuple[str, ...] = ("arrays",)) -> dict[str, Any]:
    """``reps`` rounds, each one run of the chain per path of ``paths`` (names in ``PATHS``; which goes first
    alternates): the first path's rows/s median, min and max and its runs (the workflow's own path, as
    ``pan bench replay`` compares with it), and under ``paths`` the same for each path, with the ratio of the
    medians arrays / per-event when both ran."""
    runs: dict[str, list[dict[str, Any]]] = {path: [] for path in paths}
    rows = 0
    for rep in range(reps):
        order = list(paths) if rep % 2 == 0 else list(reversed(paths))
        for path in order:
            spent: dict[str, float] = {}
            _chain, rows, seconds = run_chain(workflow, data, arrays=PATHS[path], spent=spent)
            load = os.getloadavg()[0]
            runs[path].append({"rows": rows, "seconds": round(seconds, 3), "rows_per_s": round(rows / seconds, 1),
                               "load_1min": round(load, 2),
                               "component_s": {kind: round(s, 3) for kind, s in sorted(spent.items())}})
            print(f"floor round {rep + 1}/{reps}, {path}: {rows:,} rows in {seconds:.2f} s = "
                  f"{rows / seconds:,.0f} rows/s (load {load:.2f})", file=sys.stderr, flush=True)
    summary = {}
    for path, done in runs.items():
        rates = [r["rows_per_s"] for r in done]
        kinds = done[0]["component_s"]
        summary[path] = {"rows_per_s_median": round(statistics.median(rates), 1), "rows_per_s_min": min(rates),
                         "rows_per_s_max": max(rates), "runs": done,
                         "component_s_median": {k: round(statistics.median(r["component_s"][k] for r in done), 3)
                                                for k in kinds}}
    results: dict[str, Any] = {"rows": rows, **summary[paths[0]], "paths": summary}
    if "per_event" in summary:
        base = summary["per_event"]["rows_per_s_median"]
        results["ratio_to_per_event"] = {path: round(p["rows_per_s_median"] / base, 3) for path, p in summary.items()}
    return results


def report(results: dict[str, Any]) -> str:
    paths = results["paths"]
    ratios = results.get("ratio_to_per_event", {})
    rows = [[results["config"]["workflow"], path.replace("_", "-"), common.fmt(results["rows"]),
             common.fmt(p["rows_per_s_median"]),
             f"{common.fmt(p['rows_per_s_min'])} - {common.fmt(p['rows_per_s_max'])}",
             f"{ratios[path]:.2f}x" if path in ratios else "-", results["config"]["reps"]]
            for path, p in paths.items()]
    kinds = sorted({k for p in paths.values() for k in p["component_s_median"]})
    per_kind = [[kind, *(f"{p['component_s_median'].get(kind, 0.0):.2f}" for p in paths.values())] for kind in kinds]
    return "\n".join([
        "## Floor: the full-game components in one process",
        "",
        f"{results['date']}. {common.machine_line(results['machine'], results['load_avg_at_end'])}",
        f"Command: `{results['command']}`; {results['config']['match']}. Every ordered component of the workflow "
        "chained in one process (`pan/components/chain.py`): no network, no ordering units, no recorder; the split "
        "files and "
        "INTERRUPTIONS (with heartbeats) read from disk and fed in ts order, "
        f"{results['config']['step_s']:g} s of event time per step. Rows/s = rows fed / wall time. The components' "
        "paths (identical outputs) run in the same session, rounds interleaved (the order alternates): `defaults` "
        "as the workflow runs (each component's default `arrays`), `arrays` every array path (numpy), `per-event` "
        "every per-event path. Ratio: median rows/s over the per-event median.",
        "",
        common.markdown_table(["Workflow", "Path", "Rows", "Rows/s (median)", "Min - max", "Ratio", "Reps"], rows,
                              align="llrrrrr"),
        "",
        "Seconds in each component type (`process` and `on_release_point`, medians):",
        "",
        common.markdown_table(["Component", *(path.replace("_", "-") for path in paths)], per_kind),
    ])
