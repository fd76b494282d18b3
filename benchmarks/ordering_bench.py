"""Throughput of one ordering unit through the batch API (docs/ordering.md, issue "Ordering units").

Input: N streams of periodic events, a fraction of them back-dated (out of order),
arriving as per-stream batches in round-robin. Event generation is not timed.
Compares with a plain per-event heapq K-slack loop and reports events/s and the ratio
(medians over ``--reps`` runs of each, interleaved). The same events as row ids (a component with column
inputs) go through the unit both as lists (``push_timed``) and as int64 arrays (``push_rows``), side by side.

    pan bench ordering [--events 1000000] [--streams 40] [--batch 100] [--reps 3] [--write docs/ordering.md]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from heapq import heappop, heappush
from typing import TYPE_CHECKING, Any

from benchmarks import common

if TYPE_CHECKING:  # imported where used: `pan` imports every benchmark module on start
    from pan.ordering.settings import OrderingSettings
    from pan.ordering.unit import OrderingUnit

HELP = "events/s of one ordering unit through the batch API against a per-event heapq K-slack loop"
SECTION = "ordering-bench"
PS_PER_MS = 10**9


def make_input(n_events: int, n_streams: int, batch: int, disorder: float, seed: int = 1):
    """Round-robin batches [(stream, [event, ...]), ...]; ``disorder`` of events are back-dated."""
    rng = random.Random(seed)
    per = n_events // n_streams
    period = 5 * PS_PER_MS  # 200 Hz per sensor
    streams = [f"SENSOR{s}" for s in range(n_streams)]
    data = []
    for _s in range(n_streams):
        offset = rng.randrange(period)
        evs = []
        for i in range(per):
            ts = i * period + offset
            if rng.random() < disorder:
                ts -= rng.randrange(1, 20 * PS_PER_MS)  # up to 20 ms back-dated
            evs.append({"i": i, "ts": ts, "x": 0, "y": 0})
        data.append(evs)
    batches = []
    for start in range(0, per, batch):
        for s in range(n_streams):
            batches.append((streams[s], data[s][start : start + batch]))
    return streams, batches


def run_unit(streams, batches, settings: OrderingSettings) -> tuple[float, int, OrderingUnit]:
    from pan.ordering.unit import OrderingUnit

    unit = OrderingUnit(settings, streams)
    return (*_timed_pushes(unit, unit.push, batches), unit)


def _timed_pushes(unit: OrderingUnit, push: Any, calls: list[tuple[Any, ...]]) -> tuple[float, int]:
    """Seconds to make every ``push(*call)`` and flush, and how many events came out (late ones too)."""
    n = 0
    t0 = time.perf_counter()
    for call in calls:
        r = push(*call)
        n += len(r.events) + len(r.late)
    r = unit.flush()
    n += len(r.events) + len(r.late)
    return time.perf_counter() - t0, n


def row_batches(batches, as_arrays: bool) -> list[tuple[str, Any, Any]]:
    """The batches as (stream, ts, row ids): lists, or int64 arrays (not timed)."""
    import numpy as np

    out, next_id = [], 0
    for stream, events in batches:
        tss, ids = [ev["ts"] for ev in events], list(range(next_id, next_id + len(events)))
        next_id += len(events)
        out.append((stream, np.array(tss, dtype=np.int64), np.array(ids, dtype=np.int64)) if as_arrays
                   else (stream, tss, ids))
    return out


def run_rows(streams, batches, settings: OrderingSettings, as_arrays: bool) -> tuple[float, int, OrderingUnit]:
    """``run_unit`` of the events as row ids with their ts: ``push_timed`` of lists or ``push_rows`` of arrays."""
    from pan.ordering.unit import OrderingUnit

    prepared = row_batches(batches, as_arrays)
    unit = OrderingUnit(settings, streams)
    return (*_timed_pushes(unit, unit.push_rows if as_arrays else unit.push_timed, prepared), unit)


def run_baseline(batches, k: int) -> tuple[float, int]:
    """Textbook K-slack: one heappush per event, clk = max ts, pop while ts + K <= clk."""
    heap: list = []
    clk = None
    seq = 0
    out = []
    t0 = time.perf_counter()
    for _stream, events in batches:
        for ev in events:
            ts = ev["ts"]
            seq += 1
            heappush(heap, (ts, seq, ev))
            if clk is None or ts > clk:
                clk = ts
            while heap and heap[0][0] + k <= clk:
                out.append(heappop(heap)[2])
    while heap:
        out.append(heappop(heap)[2])
    return time.perf_counter() - t0, len(out)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--streams", type=int, default=40)
    p.add_argument("--batch", type=int, default=100, help="events per push (per stream)")
    p.add_argument("--disorder", type=float, default=0.05, help="fraction of back-dated events")
    p.add_argument("--reps", type=int, default=1, help="runs of each configuration; the report shows medians")
    p.add_argument("--write", metavar="PATH", help="update this Markdown report (e.g. docs/ordering.md)")


def run(args: argparse.Namespace) -> int:
    from pan.ordering.settings import OrderingSettings

    streams, batches = make_input(args.events, args.streams, args.batch, args.disorder)
    total = sum(len(b) for _s, b in batches)
    print(f"{total} events, {args.streams} streams, batches of {args.batch}, {args.disorder:.0%} out of order",
          file=sys.stderr)
    # A batch spans batch * 5 ms of event time per stream; start K there (offline init, no warm-up loss).
    k0 = (args.batch * 5 + 20) * PS_PER_MS
    configs = {
        "all inputs clock (default)": OrderingSettings(initial_k=k0),
        f"one clock stream ({streams[0]})": OrderingSettings(clock=(streams[0],), initial_k=k0),
    }
    rows_of = {ROW_LISTS: False, ROW_ARRAYS: True}
    rates: dict[str, list[float]] = {label: [] for label in [*configs, *rows_of, BASELINE]}
    units: dict[str, dict[str, float]] = {}
    for _ in range(max(1, args.reps)):
        for label, settings in configs.items():
            elapsed, n, unit = run_unit(streams, batches, settings)
            assert n == total
            rates[label].append(total / elapsed)
            units[label] = {"final_k_ms": unit.k / PS_PER_MS, "late": unit.late_count}
        for label, as_arrays in rows_of.items():  # the default settings, the events as row ids
            elapsed, n, unit = run_rows(streams, batches, next(iter(configs.values())), as_arrays)
            assert n == total
            rates[label].append(total / elapsed)
            units[label] = {"final_k_ms": unit.k / PS_PER_MS, "late": unit.late_count}
        k_final = round(units[next(iter(configs))]["final_k_ms"] * PS_PER_MS)
        elapsed, n = run_baseline(batches, k_final)
        assert n == total
        rates[BASELINE].append(total / elapsed)
    results: dict[str, Any] = {
        **common.run_header("ordering"),
        "config": {"events": total, "streams": args.streams, "batch": args.batch, "disorder": args.disorder,
                   "reps": max(1, args.reps)},
        "events_per_s": {label: round(common.median(r)) for label, r in rates.items()},
        "events_per_s_range": {label: [round(min(r)), round(max(r))] for label, r in rates.items()},
        "units": units,
        "load_avg_at_end": list(os.getloadavg()),
    }
    results["ratio_unit_vs_baseline"] = round(
        results["events_per_s"][next(iter(configs))] / results["events_per_s"][BASELINE], 2)
    results["ratio_arrays_vs_lists"] = round(
        results["events_per_s"][ROW_ARRAYS] / results["events_per_s"][ROW_LISTS], 2)
    for label, rate in results["events_per_s"].items():
        print(f"{label}: {rate:,.0f} events/s", file=sys.stderr)
    common.publish(results, args.write, SECTION, lambda: report(results))
    return 0


BASELINE = "baseline per-event heapq K-slack (fixed K)"
ROW_LISTS = "row ids as lists (push_timed), all inputs clock"
ROW_ARRAYS = "row ids as int64 arrays (push_rows), all inputs clock"


def report(results: dict[str, Any]) -> str:
    config = results["config"]
    rows = [[label, common.fmt(rate), "{:,} - {:,}".format(*results["events_per_s_range"][label]), *(
        [f"{results['units'][label]['final_k_ms']:.1f}", results["units"][label]["late"]]
        if label in results["units"] else ["-", "-"])] for label, rate in results["events_per_s"].items()]
    return "\n".join([
        *common.report_head("## Ordering unit throughput", results),
        f"Command: `{results['command']}`: {config['events']:,} events over {config['streams']} streams at 200 Hz, "
        f"{config['disorder']:.0%} back-dated by up to 20 ms, batches of {config['batch']} per stream in round "
        f"robin; medians of {config['reps']} runs, interleaved. Ratio unit / baseline: "
        f"{results['ratio_unit_vs_baseline']:.2f}. Row ids as arrays / as lists: "
        f"{results['ratio_arrays_vs_lists']:.2f}.",
        "",
        common.markdown_table(["Configuration", "Events/s", "Min - max", "Final K ms", "Late"], rows),
    ])
