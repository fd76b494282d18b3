"""Generated matches and the ball pipeline over them, for the ball-query tests.

``match(minutes, seed)`` generates a match once per test session (cached in a
temporary folder) and runs active_ball -> ball_hits -> player/team possession
and shots over it, in time chunks, calling each component's ``process`` with
its inputs merged in (ts, input position) order, exactly what an ordering unit
with no late events delivers. The ordering units themselves are exercised by
the determinism tests, which feed through ``feed`` with jitter.
"""

from __future__ import annotations

import atexit
import csv
import gc
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from pan.components.testing import OutputReader, build_component, in_input_order
from workers import debs

KEYS = ("sid", "ts", "x", "y", "z", "v", "a", "vx", "vy", "vz", "ax", "ay", "az")
CHUNK_PS = 5 * debs.PS_PER_S
SAMPLE_PS = 40 * debs.PS_PER_S
PAN = str(Path(sys.executable).with_name("pan"))
_DIR: Path | None = None
_CACHE: dict[tuple[float, int], Match] = {}


def _root() -> Path:
    global _DIR
    if _DIR is None:
        _DIR = Path(tempfile.mkdtemp(prefix="pan-ballgame-"))
        atexit.register(shutil.rmtree, _DIR, True)
    return _DIR


@dataclass
class Match:
    """A generated match, its truth, and every output stream of the ball pipeline."""

    folder: Path
    kicks: list[tuple[int, str, int]]  # ts, player, ball
    possession: list[tuple[str, int, int]]  # player, start, end
    shots: list[tuple[str, int, int]]  # player, start, end
    interruptions: list[tuple[int, int]]
    outputs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    counters: dict[str, dict[str, Any]] = field(default_factory=dict)
    active: np.ndarray = field(default_factory=lambda: np.empty((0, 13), dtype=np.int64))  # ACTIVEBALL, KEYS order
    sample: np.ndarray = field(default_factory=lambda: np.empty((0, 13), dtype=np.int64))  # raw rows, first 40 s


def read_csv(path: Path) -> list[list[str]]:
    with path.open() as f:
        rows = list(csv.reader(f))
    return rows[1:]


def interruption_events(interruptions: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """The INTERRUPTIONS stream as the simulator feeds it (an end before a begin at equal ts)."""
    events = [(s, 1, "begin") for s, _ in interruptions] + [(e, 0, "end") for _, e in interruptions]
    return [{"ts": ts, "event": ev} for ts, _rank, ev in sorted(events)]


def iter_rows(path: Path, block: int = 48 << 20) -> Iterator[np.ndarray]:
    """The full-game CSV as (n, 13) int64 arrays of about ``block`` bytes each, in file order.

    The generator writes rows sorted by (ts, sid), so consecutive blocks are
    consecutive in time; reading in blocks keeps memory flat for long matches.
    """
    rest = b""
    with path.open("rb") as f:
        while True:
            data = f.read(block)
            if not data:
                break
            data = rest + data
            cut = data.rfind(b"\n") + 1
            data, rest = data[:cut], data[cut:]
            if data:
                yield np.fromstring(data.replace(b"\n", b",").decode(), dtype=np.int64, sep=",").reshape(-1, 13)
    if rest.strip():
        yield np.fromstring(rest.decode(), dtype=np.int64, sep=",").reshape(-1, 13)


def as_events(rows: np.ndarray) -> list[dict[str, int]]:
    return [dict(zip(KEYS, row, strict=True)) for row in rows.tolist()]


def run_pipeline(folder: Path, interruptions: list[tuple[int, int]], params: dict[str, Any] | None = None) -> Match:
    """Run the four ball components over ``folder``; returns outputs (truth left empty).

    The cyclic garbage collector is paused meanwhile: millions of short-lived
    row dicts would otherwise trigger full collections that cost more than
    the analysis.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _run_pipeline(folder, interruptions, params or {})
    finally:
        if was_enabled:
            gc.enable()


def _run_pipeline(folder: Path, interruptions: list[tuple[int, int]], params: dict[str, Any]) -> Match:
    active = build_component("active_ball", params.get("active_ball"), buffer_size=200_000)
    hits = build_component("ball_hits", params.get("ball_hits"), buffer_size=100_000)
    player = build_component("player_possession", params.get("player_possession"))
    team = build_component("team_possession", params.get("team_possession"))
    shots = build_component("shots", params.get("shots"))
    ab_reader, hit_reader = OutputReader(active, "ACTIVEBALL"), OutputReader(hits, "BALLHITS")
    kickoff = debs.FIRST_HALF[0]
    ball_sids = list(debs.BALLS)
    player_sids = [sid for sids in debs.PLAYER_SENSORS.values() for sid in sids]
    inter = interruption_events(interruptions)
    hit_list: list[dict[str, Any]] = []
    active_parts, samples = [], []
    for rows in iter_rows(folder / "full-game"):
        balls, players = np.isin(rows[:, 0], ball_sids), np.isin(rows[:, 0], player_sids)
        samples.append(rows[(rows[:, 1] >= kickoff) & (rows[:, 1] < kickoff + SAMPLE_PS) & (balls | players)])
        ball_rows, player_rows = rows[balls], rows[players]
        lo, end = int(rows[0, 1]), int(rows[-1, 1]) + 1
        while lo < end:
            hi = min(lo + CHUNK_PS, end)
            b = ball_rows[(ball_rows[:, 1] >= lo) & (ball_rows[:, 1] < hi)]
            p = player_rows[(player_rows[:, 1] >= lo) & (player_rows[:, 1] < hi)]
            active.process(as_events(b))
            ab = ab_reader.new()
            active_parts.append(np.array([[ev[k] for k in KEYS] for ev in ab], dtype=np.int64).reshape(-1, 13))
            hits.process(in_input_order(as_events(p), ab))
            new_hits = hit_reader.new()
            hit_list += new_hits
            chunk_inter = []
            while inter and inter[0]["ts"] < hi:
                chunk_inter.append(inter.pop(0))
            q_in = in_input_order(chunk_inter, new_hits, ab)
            player.process(q_in)
            team.process(q_in)
            shots.process(q_in)
            lo = hi
    sample = np.concatenate(samples)
    match = Match(folder, [], [], [], interruptions, active=np.concatenate(active_parts), sample=sample)
    match.outputs["BALLHITS"] = hit_list
    for comp in (player, team, shots):
        for name, stream in comp.ctx.outputs.items():
            buf = stream.buffer
            match.outputs[name] = [orjson.loads(item) for item in buf.read(-1, oldest=buf.capacity).items]
    for name, comp in (("active_ball", active), ("ball_hits", hits), ("player_possession", player),
                       ("team_possession", team), ("shots", shots)):
        match.counters[name] = comp.counters()
    return match


def generate(minutes: float, seed: int) -> Path:
    folder = _root() / f"m{minutes}-s{seed}"
    if not (folder / "full-game").is_file():
        subprocess.run([PAN, "generate", "--exact", "--minutes", str(minutes), "--seed", str(seed), "--out",
                        str(folder)],
                       check=True, capture_output=True)
    return folder


def match(minutes: float, seed: int) -> Match:
    """Generate (once per session) and analyse a match; ground truth included."""
    key = (minutes, seed)
    if key not in _CACHE:
        folder = generate(minutes, seed)
        truth = folder / "truth"
        interruptions = [(int(a), int(b)) for a, b in read_csv(folder / "interruptions.csv")]
        m = run_pipeline(folder, interruptions)
        m.kicks = [(int(t), p, int(b)) for t, p, b in read_csv(truth / "kicks.csv")]
        m.possession = [(p, int(a), int(b)) for p, a, b in read_csv(truth / "possession.csv")]
        m.shots = [(p, int(a), int(b)) for p, a, b in read_csv(truth / "shots.csv")]
        _CACHE[key] = m
    return _CACHE[key]


def match_kicks(truth: list[tuple[int, str, int]], found: list[dict[str, Any]], tol_ps: int
                ) -> tuple[int, list[tuple[int, str, int]], list[dict[str, Any]]]:
    """Greedy one-to-one matching by ts (within ``tol_ps``) and player.

    Returns (matched, missed truth kicks, false hits).
    """
    found = sorted(found, key=lambda h: h["ts"])
    used = [False] * len(found)
    ts = [h["ts"] for h in found]
    missed = []
    matched = 0
    for t, player, _ball in truth:
        i = int(np.searchsorted(ts, t - tol_ps))
        ok = False
        while i < len(found) and ts[i] <= t + tol_ps:
            if not used[i] and found[i]["player"] == player:
                used[i] = ok = True
                break
            i += 1
        if ok:
            matched += 1
        else:
            missed.append((t, player, _ball))
    false = [h for h, u in zip(found, used, strict=True) if not u]
    return matched, missed, false


def feed_jittered(component: Any, streams: dict[str, list[dict[str, Any]]], seed: int,
                  lag_ps: int = 100 * debs.PS_PER_MS) -> None:
    """Feed through the ordering unit in random batches and a random stream interleaving.

    Time is cut into slices of ``lag_ps``; within a slice the streams are
    visited in random order and each one's events go in 1..3 random batches.
    No stream gets more than two slices ahead of another, so a ``min_k`` of a
    few slices keeps every event in time, and the output must not change.
    """
    rng = np.random.default_rng(seed)
    names = [n for n, evs in streams.items() if evs]
    if not names:
        component.finish()
        return
    lo = min(streams[n][0]["ts"] for n in names)
    hi = max(streams[n][-1]["ts"] for n in names)
    cursor = dict.fromkeys(names, 0)
    t = lo - lo % lag_ps
    while t <= hi:
        t += lag_ps
        for n in rng.permutation(names):
            evs = streams[n]
            start = end = cursor[n]
            while end < len(evs) and evs[end]["ts"] < t:
                end += 1
            cuts = sorted(rng.integers(start, end + 1, size=int(rng.integers(0, 3))).tolist())
            for a, b in zip([start, *cuts], [*cuts, end], strict=True):
                if b > a:
                    component.feed(n, evs[a:b])
            cursor[n] = end
    component.finish()


def rows_to_events(rows: np.ndarray, sids: Any = None) -> list[dict[str, int]]:
    if sids is not None:
        rows = rows[np.isin(rows[:, 0], list(sids))]
    return as_events(rows)
