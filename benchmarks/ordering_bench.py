"""Throughput of one ordering unit through the batch API (docs/ordering.md, issue "Ordering units").

Input: N streams of periodic events, a fraction of them back-dated (out of order),
arriving as per-stream batches in round-robin. Event generation is not timed.
Compares with a plain per-event heapq K-slack loop and prints events/s and the ratio.

    .venv/bin/python benchmarks/ordering_bench.py [--events 1000000] [--streams 40] [--batch 100]
"""

from __future__ import annotations

import argparse
import random
import time
from heapq import heappop, heappush

from pan.ordering import OrderingSettings, OrderingUnit

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
    unit = OrderingUnit(settings, streams)
    n = 0
    t0 = time.perf_counter()
    for stream, events in batches:
        r = unit.push(stream, events)
        n += len(r.events) + len(r.late)
    r = unit.flush()
    n += len(r.events) + len(r.late)
    return time.perf_counter() - t0, n, unit


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--streams", type=int, default=40)
    ap.add_argument("--batch", type=int, default=100, help="events per push (per stream)")
    ap.add_argument("--disorder", type=float, default=0.05, help="fraction of back-dated events")
    args = ap.parse_args()

    streams, batches = make_input(args.events, args.streams, args.batch, args.disorder)
    total = sum(len(b) for _s, b in batches)
    print(f"{total} events, {args.streams} streams, batches of {args.batch}, {args.disorder:.0%} out of order")

    # A batch spans batch * 5 ms of event time per stream; start K there (offline init, no warm-up loss).
    k0 = (args.batch * 5 + 20) * PS_PER_MS
    configs = {
        "all inputs clock (default)": OrderingSettings(initial_k=k0),
        f"one clock stream ({streams[0]})": OrderingSettings(clock=(streams[0],), initial_k=k0),
    }
    for label, settings in configs.items():
        dt, n, unit = run_unit(streams, batches, settings)
        assert n == total
        print(
            f"ordering unit, {label}: {total / dt:,.0f} events/s ({dt:.2f} s), "
            f"final K {unit.k / PS_PER_MS:.1f} ms, late {unit.late_count}"
        )
        if label.startswith("all"):
            unit_rate, k_final = total / dt, unit.k
    dt, n = run_baseline(batches, k_final)
    assert n == total
    print(f"baseline per-event heapq K-slack (fixed K): {total / dt:,.0f} events/s ({dt:.2f} s)")
    print(f"ratio unit / baseline: {unit_rate / (total / dt):.2f}")


if __name__ == "__main__":
    main()
