"""Helpers for Q1/Q3 tests: read a generated match and feed components in time order."""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pan.components.base import Component
from pan.components.testing import build_component, output_tuples
from workers.debs import PS_PER_S, SENSOR_OWNER, sensor_stream

FIELDS = ("sid", "ts", "x", "y", "z", "v", "a", "vx", "vy", "vz", "ax", "ay", "az")
#: Ordering settings for offline feeding in chunks: K stays at 1 s, so nothing is late.
OFFLINE = {"initial_k": 10**12, "window": 10**9}


def generate(out: Path, minutes: float, seed: int) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pan", "generate", "--exact", "--minutes", str(minutes), "--seed", str(seed),
         "--out", str(out)],
        check=True, capture_output=True,
    )
    return out


def player_rows(path: Path) -> np.ndarray:
    """Rows of players' and referee's sensors, in file (= ts) order."""
    rows = np.loadtxt(path, delimiter=",", dtype=np.int64)
    keep = np.isin(rows[:, 0], np.array(sorted(SENSOR_OWNER)))
    return rows[keep]


def as_events(rows: np.ndarray) -> list[dict[str, Any]]:
    return [dict(zip(FIELDS, r, strict=True)) for r in rows.tolist()]


def feed_in_chunks(component: Component, events: list[dict[str, Any]], stream_of, chunk_ps: int) -> None:
    """Feed ts-ordered ``events`` chunk by chunk, each chunk one batch per stream, then finish."""
    i, n = 0, len(events)
    while i < n:
        end = events[i]["ts"] + chunk_ps
        batches: dict[str, list[dict[str, Any]]] = defaultdict(list)
        while i < n and events[i]["ts"] < end:
            batches[stream_of(events[i])].append(events[i])
            i += 1
        for stream, batch in batches.items():
            component.feed(stream, batch)
    component.finish()


def sensor_stream_of(ev: dict[str, Any]) -> str:
    return sensor_stream(ev["sid"])


def player_stream_of(ev: dict[str, Any]) -> str:
    return ev["player"]


def run_players(events: list[dict[str, Any]], players: list[str] | None = None) -> dict[str, list[dict]]:
    """player_average over sensor events: output stream -> tuples."""
    params: dict[str, Any] = dict(OFFLINE)
    if players is not None:
        params["players"] = players
    comp = build_component("player_average", params)
    mine = set(comp.ctx.inputs)
    feed_in_chunks(comp, [e for e in events if sensor_stream(e["sid"]) in mine], sensor_stream_of, 10**11)
    return {name: output_tuples(comp, name) for name in comp.ctx.outputs}


def merged(streams: dict[str, list[dict]], names: list[str]) -> list[dict[str, Any]]:
    """Tuples of ``names`` in (ts, stream) order, without their indices."""
    out = [({k: v for k, v in t.items() if k != "i"}, pos) for pos, n in enumerate(names) for t in streams[n]]
    out.sort(key=lambda tp: (tp[0]["ts"], tp[1]))
    return [t for t, _ in out]


def feed_jittered(
    component: Component, events: list[dict[str, Any]], stream_of, seed: int, max_delay_ps: int, max_batch: int
) -> None:
    """Feed ``events`` as they might arrive: per-stream order kept, streams delayed and batched at random."""
    rng = np.random.default_rng(seed)
    per: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        per[stream_of(e)].append(e)
    arrivals: list[tuple[int, str, list[dict[str, Any]]]] = []
    for stream, evs in per.items():
        i, latest = 0, 0
        while i < len(evs):
            size = int(rng.integers(1, max_batch + 1))
            batch = evs[i : i + size]
            latest = max(latest, batch[-1]["ts"] + int(rng.integers(0, max_delay_ps + 1)))
            arrivals.append((latest, stream, batch))
            i += size
    arrivals.sort(key=lambda a: a[0])
    for _, stream, batch in arrivals:
        component.feed(stream, batch)
    component.finish()


def all_outputs(component: Component) -> dict[str, list[dict[str, Any]]]:
    return {name: output_tuples(component, name) for name in component.ctx.outputs}


MATCH_MINUTES = 1


_MATCH: dict[str, Any] = {}


def load_match(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A generated match run through player_average, once per test session (cached here)."""
    if _MATCH:
        return _MATCH
    folder = generate(tmp_path_factory.mktemp("q13match"), MATCH_MINUTES, 11)
    rows = player_rows(folder / "full-game")
    comp = build_component("player_average", dict(OFFLINE), buffer_size=200_000)
    feed_in_chunks(comp, as_events(rows), sensor_stream_of, PS_PER_S)
    streams = {
        name: [{k: v for k, v in t.items() if k != "i"} for t in output_tuples(comp, name)]
        for name in comp.ctx.outputs
    }
    assert not streams.pop("A1_late"), "offline feeding must not make events late"
    _MATCH.update({
        "folder": folder,
        "player_streams": streams,
        "player_counters": comp.counters(),
        "first_ts": int(rows[0, 1]),
        "last_ts": int(rows[-1, 1]),
    })
    return _MATCH


def run_q1(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """player_average -> running over a whole generated match, block by block (memory stays flat).

    Each component's ``process`` gets its input in ts order, as an ordering
    unit with no late events delivers it; returns the ``RUNAGG_wholeGame_*``
    streams.
    """
    import gc

    import orjson

    from tests.support.ballgame import as_events, iter_rows

    avg = build_component("player_average", dict(OFFLINE), buffer_size=400_000)
    run = build_component("running", dict(OFFLINE), buffer_size=100)
    readers = {name: -1 for name in avg.ctx.outputs if not name.endswith("_late")}
    sids = np.array(sorted(SENSOR_OWNER))
    was = gc.isenabled()
    gc.disable()
    try:
        for rows in iter_rows(folder / "full-game"):
            avg.process(as_events(rows[np.isin(rows[:, 0], sids)]))
            new: list[dict[str, Any]] = []
            for name, after in readers.items():
                buf = avg.ctx.outputs[name].buffer
                page = buf.read(after, oldest=buf.capacity)
                if page.items:
                    readers[name] = page.indices[-1]
                    new += [orjson.loads(item) for item in page.items]
            new.sort(key=lambda t: t["ts"])
            run.process(new)
    finally:
        if was:
            gc.enable()
    return {name: output_tuples(run, name) for name in run.ctx.outputs if name.startswith("RUNAGG_wholeGame_")}
