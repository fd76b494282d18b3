"""Detection policies under sensor-row loss: precision and recall of hits, possession and shots.

Generates matches (one seed per repetition), drops each ball and player row
with probability 1%, 5% and 10%, and runs active_ball -> ball_hits ->
player_possession and shots over what is left, offline, once with
``policy: best_effort`` and once with ``policy: nfp``. The outputs are scored
against the generator's truth files (docs/policies.md): a hit matches a truth
kick of the same player within 10 ms; a possession interval matches a truth
interval of the same player whose start and end are both within 10 ms; a shot
matches a truth shot of the same player starting within 10 ms. Under nfp the
outputs are the hits on BALLHITS (not the doubt markers), the possessions the
component judged certain and the shots on SHOTS.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from simulator.score import ambiguous_spans

HELP = "precision and recall of best_effort and nfp detection under random row loss"
KEYS = ("sid", "ts", "x", "y", "z", "v", "a", "vx", "vy", "vz", "ax", "ay", "az")
CHUNK_PS = 5 * 10**12
TOLERANCE_PS = 10 * 10**9
POLICIES = ("best_effort", "nfp")
OUTPUTS = ("hits", "possession", "shots")
BUFFER = 2_000_000  # tuples each component output holds: a whole match's


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--minutes", type=float, default=2.0, help="minutes of play per match (default 2)")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5], help="one match per seed (default 1-5)")
    p.add_argument("--loss", type=float, nargs="+", default=[0.01, 0.05, 0.1], help="row loss rates")
    p.add_argument("--out", type=Path, default=None, help="write the results as JSON here")


# --- the pipeline ---------------------------------------------------------------------------------

def events(rows: np.ndarray) -> list[dict[str, int]]:
    return [dict(zip(KEYS, row, strict=True)) for row in rows.tolist()]


def run_pipeline(rows: np.ndarray, interruptions: list[tuple[int, int]], policy: str) -> dict[str, Any]:
    """Hits, possession intervals and shots of ``rows`` (sorted by ts) under ``policy``."""
    from pan.components.testing import OutputReader, build_component, in_input_order
    from workers import debs

    params = {"clock_mode": "watermark", "policy": policy}
    active = build_component("active_ball", buffer_size=BUFFER, params={"clock_mode": "watermark"})
    hits = build_component("ball_hits", buffer_size=BUFFER, params=params)
    possession = build_component("player_possession", buffer_size=BUFFER, params=params)
    shots = build_component("shots", buffer_size=BUFFER, params=params)
    ab_reader, hit_reader = OutputReader(active, "ACTIVEBALL"), OutputReader(hits, "BALLHITS")
    ball_sids = list(debs.BALLS)
    player_sids = [sid for sids in debs.PLAYER_SENSORS.values() for sid in sids]
    inter = sorted([(s, 1, "begin") for s, _ in interruptions] + [(e, 0, "end") for _, e in interruptions])
    inter_events = [{"ts": ts, "event": ev} for ts, _, ev in inter]
    balls, players = rows[np.isin(rows[:, 0], ball_sids)], rows[np.isin(rows[:, 0], player_sids)]
    found_hits: list[dict[str, Any]] = []
    lo, end = int(rows[0, 1]), int(rows[-1, 1]) + 1
    while lo < end:
        hi = lo + CHUNK_PS
        active.process(events(balls[(balls[:, 1] >= lo) & (balls[:, 1] < hi)]))
        ab = ab_reader.new()
        hits.process(in_input_order(events(players[(players[:, 1] >= lo) & (players[:, 1] < hi)]), ab))
        new = hit_reader.new()
        found_hits += new
        chunk = []
        while inter_events and inter_events[0]["ts"] < hi:
            chunk.append(inter_events.pop(0))
        q = in_input_order(chunk, new, ab)
        possession.process(q)
        shots.process(q)
        lo = hi
    buf = shots.ctx.outputs["SHOTS"].buffer
    first: dict[int, tuple[str, int]] = {}
    for item in buf.read(-1, oldest=buf.capacity).items:
        row = orjson.loads(item)
        first.setdefault(row["shot"], (row["player"], row["ts"]))
    return {
        "hits": [(h["ts"], h["player"]) for h in found_hits if "player" in h],
        "possession": [(p, s, e) for p, s, e, certain in possession.intervals if certain],
        "shots": [(ts, p) for p, ts in first.values()],
        "counters": {name: detector_counters(comp) for name, comp in (("ball_hits", hits), ("shots", shots))},
    }


def detector_counters(component: Any) -> dict[str, Any]:
    """The detector's own counters (kept, withheld, cut); the ordering unit's histogram has an infinite
    bucket bound that JSON cannot carry, and the ordering is not what this benchmark measures."""
    return {key: value for key, value in component.counters().items() if key != "ordering"}


# --- scoring --------------------------------------------------------------------------------------

def matches(found: list[Any], truth: list[Any], same: Any) -> int:
    """Greedy one-to-one matches of ``found`` to ``truth`` under ``same``."""
    used = [False] * len(truth)
    n = 0
    for f in found:
        for k, t in enumerate(truth):
            if not used[k] and same(f, t):
                used[k] = True
                n += 1
                break
    return n


def score(out: dict[str, Any], truth: dict[str, list[Any]]) -> dict[str, dict[str, Any]]:
    rules = {
        "hits": lambda f, t: f[1] == t[1] and abs(f[0] - t[0]) <= TOLERANCE_PS,
        "possession": lambda f, t: f[0] == t[0] and abs(f[1] - t[1]) <= TOLERANCE_PS
        and abs(f[2] - t[2]) <= TOLERANCE_PS,
        "shots": lambda f, t: f[1] == t[1] and abs(f[0] - t[0]) <= TOLERANCE_PS,
    }
    result = {}
    unclear = truth.get("unclear_hits", [])  # ambiguous or unobservable kicks: scored by neither policy
    spans = truth.get("unclear_spans", [])  # the play such kicks decide (simulator.score.ambiguous_spans)

    def decided_by_unclear(interval: tuple[str, int, int]) -> bool:
        return any(x - TOLERANCE_PS <= t <= y + TOLERANCE_PS for x, y in spans for t in interval[1:])

    for name, same in rules.items():
        found, true = out[name], truth[name]
        if name == "hits":
            found = [f for f in found if not any(abs(f[0] - t) <= TOLERANCE_PS for t in unclear)]
        if name == "possession":
            found = [f for f in found if not decided_by_unclear(f)]
            true = [t for t in true if not decided_by_unclear(t)]
        n = matches(found, true, same)
        result[name] = {
            "found": len(found), "truth": len(true), "matched": n, "false_positives": len(found) - n,
            "precision": n / len(found) if found else 1.0, "recall": n / len(true) if true else 1.0,
        }
    return result


# --- matches --------------------------------------------------------------------------------------

def read_rows(path: Path) -> np.ndarray:
    data = path.read_bytes()
    return np.fromstring(data.replace(b"\n", b",").decode(), dtype=np.int64, sep=",").reshape(-1, 13)


def read_truth(folder: Path) -> dict[str, list[Any]]:
    def rows(name: str) -> list[list[str]]:
        with (folder / "truth" / name).open() as f:
            return list(csv.reader(f))[1:]

    kicks = rows("kicks.csv")
    # The realistic truth flags kicks with two players within reach (ambiguous) or no ball data
    # (unobservable): no detector can tell their kicker, so they are set apart as in simulator/score.py.
    clear = [k for k in kicks if len(k) < 7 or (k[5] in ("0", "False", "false") and k[6] in ("1", "True", "true"))]
    possession = [(p, int(a), int(b)) for p, a, b in rows("possession.csv")]
    # A possession that such a kick starts or ends is set apart too, found or true.
    flagged = [{"ts": k[0], "ambiguous": "0" if k in clear else "1", "observable": "1"} for k in kicks]
    return {
        "hits": [(int(t), p) for t, p, *_ in clear],
        "unclear_hits": [int(k[0]) for k in kicks if k not in clear],
        "unclear_spans": ambiguous_spans(flagged, possession),
        "possession": possession,
        "shots": [(int(a), p) for p, a, *_ in rows("shots.csv")],  # the realistic truth has more columns
    }


def generate(minutes: float, seed: int, root: Path) -> Path:
    folder = root / f"m{minutes}-s{seed}"
    if not (folder / "full-game").is_file():
        subprocess.run([sys.executable, "-m", "pan", "generate", "--minutes", str(minutes), "--seed", str(seed),
                        "--out", str(folder)], check=True, capture_output=True)
    return folder


def lossy(rows: np.ndarray, loss: float, seed: int) -> np.ndarray:
    """Each ball and player row dropped with probability ``loss`` (the referee's rows stay)."""
    from workers import debs

    if loss <= 0:
        return rows
    sensors = list(debs.BALLS) + [sid for sids in debs.PLAYER_SENSORS.values() for sid in sids]
    rng = np.random.default_rng([seed, round(loss * 1e6)])
    dropped = np.isin(rows[:, 0], sensors) & (rng.random(len(rows)) < loss)
    return rows[~dropped]


def experiment(minutes: float, seeds: list[int], losses: list[float], root: Path) -> Iterator[dict[str, Any]]:
    """One record per (seed, loss, policy)."""
    for seed in seeds:
        folder = generate(minutes, seed, root)
        rows = read_rows(folder / "full-game")
        with (folder / "interruptions.csv").open() as f:
            interruptions = [(int(a), int(b)) for a, b in list(csv.reader(f))[1:]]
        truth = read_truth(folder)
        for loss in losses:
            kept = lossy(rows, loss, seed)
            for policy in POLICIES:
                out = run_pipeline(kept, interruptions, policy)
                yield {"seed": seed, "loss": loss, "policy": policy, "scores": score(out, truth),
                       "counters": out["counters"]}


def summary(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median, min and max over the seeds of each (loss, policy, output)."""
    table = []
    for loss in sorted({r["loss"] for r in records}):
        for policy in POLICIES:
            group = [r for r in records if r["loss"] == loss and r["policy"] == policy]
            for name in OUTPUTS:
                line: dict[str, Any] = {"loss": loss, "policy": policy, "output": name}
                for key in ("precision", "recall"):
                    values = [r["scores"][name][key] for r in group]
                    line[key] = (statistics.median(values), min(values), max(values))
                line["false_positives"] = sum(r["scores"][name]["false_positives"] for r in group)
                table.append(line)
    return table


def print_table(table: list[dict[str, Any]]) -> None:
    print(f"{'loss':>5} {'policy':<12} {'output':<11} {'precision % (min-max)':<24} {'recall % (min-max)':<24} FP")
    for line in table:
        cells = [f"{100 * m:5.1f} ({100 * lo:.1f}-{100 * hi:.1f})" for m, lo, hi in (line["precision"], line["recall"])]
        print(f"{100 * line['loss']:4.0f}% {line['policy']:<12} {line['output']:<11} {cells[0]:<24} {cells[1]:<24} "
              f"{line['false_positives']}")


def run(args: argparse.Namespace) -> int:
    from benchmarks.common import run_header

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pan-policies-") as tmp:
        records = list(experiment(args.minutes, args.seeds, args.loss, Path(tmp)))
    table = summary(records)
    print_table(table)
    result = {**run_header("policies"), "minutes": args.minutes, "seeds": args.seeds, "table": table,
              "records": records, "seconds": round(time.monotonic() - started, 1)}
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1))
    return 0
