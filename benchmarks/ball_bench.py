"""Per-event cost of the ball query components (active_ball, ball_hits, possession, shots).

Usage: ``pan bench ball DATA_DIR [--seconds S] [--reps N] [--write docs/benchmarks.md]`` where
DATA_DIR is a ``pan generate`` output. The first S seconds of play are turned
into input tuples beforehand (not timed); each component's ``process`` is then
timed over its own inputs, in ts order, as an ordering unit would release them,
including the encoding of its outputs into the ring buffers. Reported as input
events per CPU-second (process time, so other jobs on a shared machine matter
less) and per wall second, medians over ``--reps`` runs.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import common

HELP = "per-event cost of the ball query components (active_ball, ball_hits, possession, shots)"
SECTION = "ball-bench"
INPUTS = {
    "active_ball": "4 ball streams (2000 Hz each)",
    "ball_hits": "34 player sensors + `ACTIVEBALL`",
    "player_possession": "`INTERRUPTIONS`, `BALLHITS`, `ACTIVEBALL`",
    "team_possession": "same",
    "shots": "same",
}
KEYS = ("sid", "ts", "x", "y", "z", "v", "a", "vx", "vy", "vz", "ax", "ay", "az")
BUFFER = 2_000_000


def timed(component: Any, events: list[dict[str, Any]]) -> dict[str, float]:
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    for n in range(0, len(events), 2000):  # batches of the size a worker reads
        component.process(events[n:n + 2000])
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"events": len(events), "cpu_s": cpu, "per_cpu_s": len(events) / cpu, "per_wall_s": len(events) / wall}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("data", type=Path, metavar="DATA_DIR", help="a `pan generate` output folder")
    p.add_argument("--seconds", type=float, default=60.0, help="seconds of play to feed (default 60)")
    p.add_argument("--reps", type=int, default=1, help="timed runs of every component; the report shows medians")
    p.add_argument("--write", metavar="PATH", help="update this Markdown report (e.g. docs/benchmarks.md)")


def load_events(data: Path, seconds: float) -> dict[str, list[dict[str, Any]]]:
    """The first ``seconds`` of play as ball rows, player rows and interruption events (not timed)."""
    import numpy as np

    from workers import debs

    text = (data / "full-game").read_bytes().replace(b"\n", b",").decode()
    rows = np.fromstring(text, dtype=np.int64, sep=",").reshape(-1, 13)
    start = debs.FIRST_HALF[0]
    rows = rows[(rows[:, 1] >= start) & (rows[:, 1] < start + round(seconds * debs.PS_PER_S))]
    players = [sid for sids in debs.PLAYER_SENSORS.values() for sid in sids]
    interruptions = []
    for line in (data / "interruptions.csv").read_text().splitlines()[1:]:
        a, b = (int(v) for v in line.split(","))
        interruptions += [{"ts": a, "event": "begin"}, {"ts": b, "event": "end"}]
    return {"ball": [dict(zip(KEYS, r, strict=True)) for r in rows[np.isin(rows[:, 0], debs.BALLS)].tolist()],
            "player": [dict(zip(KEYS, r, strict=True)) for r in rows[np.isin(rows[:, 0], players)].tolist()],
            "interruptions": interruptions}


def time_components(events: dict[str, list[dict[str, Any]]]) -> tuple[dict[str, dict[str, float]], dict[str, int]]:
    """One timed pass of every component over its inputs, each fed the outputs of the one before."""
    from pan.components.testing import build_component, output_tuples

    def build(type_name: str) -> Any:
        return build_component(type_name, buffer_size=BUFFER)

    gc.disable()
    try:
        results = {}
        active = build("active_ball")
        results["active_ball"] = timed(active, events["ball"])
        ab = output_tuples(active, "ACTIVEBALL")
        hits = build("ball_hits")
        results["ball_hits"] = timed(hits, sorted(events["player"] + ab, key=lambda e: e["ts"]))
        bh = output_tuples(hits, "BALLHITS")
        inter = [e for e in events["interruptions"] if e["ts"] <= ab[-1]["ts"]]
        q_in = sorted(inter + bh + ab, key=lambda e: e["ts"])
        for name in ("player_possession", "team_possession", "shots"):
            results[name] = timed(build(name), q_in)
    finally:
        gc.enable()
    return results, {"ACTIVEBALL": len(ab), "BALLHITS": len(bh)}


def run(args: argparse.Namespace) -> int:
    events = load_events(args.data, args.seconds)
    runs = [time_components(events) for _ in range(max(1, args.reps))]
    counts = runs[0][1]
    components = {name: {"events": first["events"],
                         "per_cpu_s": round(common.median(r[0][name]["per_cpu_s"] for r in runs)),
                         "per_wall_s": round(common.median(r[0][name]["per_wall_s"] for r in runs))}
                  for name, first in runs[0][0].items()}
    results = {**common.run_header("ball"), "seconds": args.seconds, "reps": len(runs),
               "ball_rows": len(events["ball"]), "player_rows": len(events["player"]),
               "activeball_rows": counts["ACTIVEBALL"], "hits": counts["BALLHITS"], "components": components}
    print(f"{args.seconds:g} s of play: {results['ball_rows']:,} ball rows, {results['player_rows']:,} player rows, "
          f"{results['activeball_rows']:,} ACTIVEBALL rows, {results['hits']} hits", file=sys.stderr)
    common.publish(results, args.write, SECTION, lambda: report(results))
    return 0


def report(results: dict[str, Any]) -> str:
    rows = [[f"`{name}`", INPUTS.get(name, "-"), common.fmt(r["events"]), common.fmt(r["per_cpu_s"]),
             common.fmt(r["per_wall_s"])] for name, r in results["components"].items()]
    return "\n".join([
        *common.report_head("## Ball queries: per-event cost of the components (issue 5)", results),
        f"Command: `{results['command']}`: first {results['seconds']:g} s of play, {results['ball_rows']:,} ball "
        f"rows, {results['player_rows']:,} player rows, {results['activeball_rows']:,} `ACTIVEBALL` rows, "
        f"{results['hits']} hits. Each component's `process` is timed over its own inputs in ts order (as its "
        "ordering unit releases them), in batches of 2,000, including the encoding of its outputs into the ring "
        f"buffers; the ordering unit and HTTP are not included. Medians of {results['reps']} runs.",
        "",
        common.markdown_table(["Component", "Inputs", "Input events", "Events per CPU-second",
                               "Events per wall second"], rows, align="llrrr"),
    ])
