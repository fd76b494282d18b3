"""Per-event cost of the ball query components (active_ball, ball_hits, possession, shots).

Usage: ``.venv/bin/python benchmarks/ball_bench.py DATA_DIR [--seconds S]`` where
DATA_DIR is a ``pan generate`` output. The first S seconds of play are turned
into input tuples beforehand (not timed); each component's ``process`` is then
timed over its own inputs, in ts order, as an ordering unit would release them,
including the encoding of its outputs into the ring buffers. Reported as input
events per CPU-second (process time, so other jobs on a shared machine matter
less) and per wall second.
"""

from __future__ import annotations

import argparse
import gc
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from pan.catalog import get_component_type
from pan.channel import InputChannel
from pan.ringbuffer import RingBuffer
from pan.specs import WorkerSpec
from pan.streams import OutputStream
from workers import debs

KEYS = ("sid", "ts", "x", "y", "z", "v", "a", "vx", "vy", "vz", "ax", "ay", "az")
BUFFER = 2_000_000


def build(type_name: str) -> Any:
    import logging

    from pan.component import ComponentContext

    cls = get_component_type(type_name)
    assert cls is not None
    spec = WorkerSpec(name=type_name, type=type_name, host="127.0.0.1", port=1, peer="p", inputs=[],
                      buffer_size=BUFFER, params={})
    ctx = ComponentContext(
        spec=spec, inputs={n: InputChannel(n, RingBuffer(16)) for n in cls.input_names(spec)},
        outputs={n: OutputStream(n, BUFFER) for n in cls.output_names(spec)}, log=logging.getLogger(type_name))
    return cls(ctx)


def outputs(component: Any, stream: str) -> list[dict[str, Any]]:
    buf = component.ctx.outputs[stream].buffer
    return [orjson.loads(b) for b in buf.read(-1, oldest=buf.capacity).items]


def timed(component: Any, events: list[dict[str, Any]]) -> dict[str, float]:
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    for n in range(0, len(events), 2000):  # batches of the size a worker reads
        component.process(events[n:n + 2000])
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"events": len(events), "cpu_s": cpu, "per_cpu_s": len(events) / cpu, "per_wall_s": len(events) / wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--seconds", type=float, default=60.0)
    args = ap.parse_args()
    text = (args.data / "full-game").read_bytes().replace(b"\n", b",").decode()
    rows = np.fromstring(text, dtype=np.int64, sep=",").reshape(-1, 13)
    start = debs.FIRST_HALF[0]
    rows = rows[(rows[:, 1] >= start) & (rows[:, 1] < start + round(args.seconds * debs.PS_PER_S))]
    players = [sid for sids in debs.PLAYER_SENSORS.values() for sid in sids]
    ball_events = [dict(zip(KEYS, r, strict=True)) for r in rows[np.isin(rows[:, 0], debs.BALLS)].tolist()]
    player_events = [dict(zip(KEYS, r, strict=True)) for r in rows[np.isin(rows[:, 0], players)].tolist()]
    inter = []
    for line in (args.data / "interruptions.csv").read_text().splitlines()[1:]:
        a, b = (int(v) for v in line.split(","))
        inter += [{"ts": a, "event": "begin"}, {"ts": b, "event": "end"}]
    gc.disable()
    results = {}
    active = build("active_ball")
    results["active_ball"] = timed(active, ball_events)
    ab = outputs(active, "ACTIVEBALL")
    hits_in = sorted(player_events + ab, key=lambda e: e["ts"])
    hits = build("ball_hits")
    results["ball_hits"] = timed(hits, hits_in)
    bh = outputs(hits, "BALLHITS")
    q_in = sorted([e for e in inter if e["ts"] <= ab[-1]["ts"]] + bh + ab, key=lambda e: e["ts"])
    for name in ("player_possession", "team_possession", "shots"):
        results[name] = timed(build(name), q_in)
    gc.enable()
    print(f"{args.seconds:.0f} s of play: {len(ball_events):,} ball rows, {len(player_events):,} player rows, "
          f"{len(ab):,} ACTIVEBALL rows, {len(bh)} hits")
    print("| Component | Input events | Events per CPU-second | Events per wall second |")
    print("|---|---:|---:|---:|")
    for name, r in results.items():
        print(f"| `{name}` | {r['events']:,} | {r['per_cpu_s']:,.0f} | {r['per_wall_s']:,.0f} |")


if __name__ == "__main__":
    main()
