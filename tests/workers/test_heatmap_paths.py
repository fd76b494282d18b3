"""Q3 heat maps: the array path writes what the per-event path writes, byte for byte, index for index."""

from __future__ import annotations

import math
import random
from fractions import Fraction
from typing import Any

import numpy as np
import orjson
import pytest

from pan.components.testing import build_component, output_tuples
from pan.config.specs import WorkflowError
from tests.support.match_feed import OFFLINE, load_match, merged, player_stream_of
from tests.workers.paths import Twins
from workers.debs import FIRST_HALF, PS_PER_MS, PS_PER_S, SECOND_HALF
from workers.gametime import GAME_PS
from workers.gridcounts import GridWindows
from workers.heatmap import _TABLES, GRIDS, side_by_side_table
from workers.sparse_heatmap import PPM, dense, encode_body

S1, E1 = FIRST_HALF
S2, _E2 = SECOND_HALF
STEP = 20 * PS_PER_MS


def walk(seed: int, players: list[str], start: int, seconds: float, skip: float = 0.01) -> list[dict[str, Any]]:
    """Players wandering from ``start``, one sample each 20 ms, ``skip`` of them lost, in ts order."""
    rnd = random.Random(seed)
    out = []
    for p in players:
        x, y = rnd.uniform(0, 52483), rnd.uniform(-33960, 33965)
        for n in range(int(seconds * 50)):
            x += rnd.gauss(0, 400)
            y += rnd.gauss(0, 400)
            if rnd.random() >= skip:
                out.append({"ts": start + n * STEP, "player": p, "x": x, "y": y, "z": 0.0, "v": 0.0, "a": 0.0})
    out.sort(key=lambda s: (s["ts"], s["player"]))
    return out


def twins(**params: Any) -> Twins:
    return Twins("heatmap", {**OFFLINE, **params})


def test_empty_and_one_event_batches() -> None:
    pair = twins(players=["A2", "B3"])
    pair.process([])
    for ev in walk(1, ["A2", "B3"], S1 - PS_PER_S, 12):
        pair.process([ev])
        pair.process([])
    assert pair.compared >= 2 * 16 * 10


def test_a_batch_spanning_the_half_time_break() -> None:
    pair = twins(players=["A5"], windows=["1min", "wholeGame"])
    pair.process(walk(2, ["A5"], E1 - 70 * PS_PER_S, 75) + walk(3, ["A5"], S2 - PS_PER_S, 65))
    whole = pair.per_event.ctx.outputs["HM_wholeGame_8x13_A5"].next_index
    assert whole >= 130 and pair.compared >= whole * 8


def test_gaps_longer_than_a_second_and_lost_samples() -> None:
    samples = walk(4, ["B1", "B2"], S1, 100, skip=0.3)
    gapped = [s for s in samples if not (20 * PS_PER_S <= s["ts"] - S1 < 23 * PS_PER_S and s["player"] == "B1")
              and not (40 * PS_PER_S <= s["ts"] - S1 < 41 * PS_PER_S + 7 * PS_PER_MS)]
    pair = twins(players=["B1", "B2"])
    for start in range(0, len(gapped), 333):
        pair.process(gapped[start:start + 333])
    assert pair.per_event.counters()["gaps"] >= 3 and pair.compared >= 2 * 16 * 95


def test_windows_empty_again_after_the_data_stops() -> None:
    """A player whose data stops: the 1-minute window empties (one empty map), the whole game keeps its shares."""
    pair = twins(players=["A7"], windows=["1min", "wholeGame"], grids=["64x100"])
    pair.process(walk(5, ["A7"], S1, 5, skip=0))  # samples up to 4.98 s
    pair.process(walk(6, ["A7"], S1 + 70 * PS_PER_S, 1)[-1:])  # one sample 66 s later: 70 s of boundaries
    one = output_tuples(pair.per_event, "HM_1min_64x100_A7")
    whole = output_tuples(pair.per_event, "HM_wholeGame_64x100_A7")
    assert [t["ts"] for t in one] == [S1 + n * PS_PER_S for n in (1, 2, 3, 4, 5, 61, 62, 63, 64, 65)]
    assert (one[-1]["runs"], one[-1]["ppm"]) == ([], []) and all(t["ppm"] for t in one[:-1])
    assert [t["ts"] for t in whole] == [S1 + n * PS_PER_S for n in (1, 2, 3, 4, 5)]
    assert whole[-1]["ppm"] == one[4]["ppm"] and pair.compared == 15


def test_totals_of_a_whole_game_stay_exact() -> None:
    """Counts as large as a game allows (above 2**51 ps): shares are still the exact quotient, rounded to ppm."""
    grids = list(GRIDS)
    counted = GridWindows([None], side_by_side_table(grids), [GRIDS[g][0] * GRIDS[g][1] for g in grids])
    cells = (5, 4000, 83199, 4001)
    ps = [GAME_PS // 3 - 7, GAME_PS // 3 + 11, GAME_PS // 3 - 9, GAME_PS - 3 * (GAME_PS // 3) + 5]
    for second, (cell, amount) in enumerate(zip(cells, ps, strict=True)):
        counted.open(second * PS_PER_S, (second + 1) * PS_PER_S)
        counted.add(cell, amount)
    counted.slide(len(ps) * PS_PER_S)
    total = sum(ps)
    assert total == GAME_PS > 2**51
    for g, grid in enumerate(grids):
        table = _TABLES[grid]
        expected: dict[int, int] = {}
        for cell, amount in zip(cells, ps, strict=True):
            expected[table[cell]] = expected.get(table[cell], 0) + amount
        full = np.zeros(GRIDS[grid][0] * GRIDS[grid][1], dtype=np.int64)
        for c, d in expected.items():
            full[c] = math.floor(Fraction(d, total) * PPM + Fraction(1, 2))
        assert counted.bodies(0)[g] == encode_body(full), grid
        assert dense({"grid": grid, **orjson.loads(b"{" + counted.bodies(0)[g] + b"}")}).tolist() == full.tolist()


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_the_arrays_param_is_a_bool(bad: object) -> None:
    with pytest.raises(WorkflowError, match="arrays"):
        build_component("heatmap", {"arrays": bad})


@pytest.fixture(scope="module")
def match(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return load_match(tmp_path_factory)


@pytest.mark.process
def test_generated_match_tuple_for_tuple(match: dict[str, Any]) -> None:
    players = ["A1", "A4", "B6", "B8"]
    samples = merged(match["player_streams"], players)
    pair = twins(players=players)
    i, n = 0, len(samples)
    while i < n:  # a second of event time per batch, one feed per player stream, as the ordering unit gets them
        end = samples[i]["ts"] + PS_PER_S
        batches: dict[str, list[dict[str, Any]]] = {}
        while i < n and samples[i]["ts"] < end:
            batches.setdefault(player_stream_of(samples[i]), []).append(samples[i])
            i += 1
        for stream, batch in batches.items():
            pair.feed(stream, batch)
    pair.finish()
    seconds = (samples[-1]["ts"] - S1) // PS_PER_S
    counters = pair.per_event.counters()
    assert counters["emitted"] + counters["unchanged"] == len(players) * 16 * seconds
    assert pair.compared == counters["emitted"] > len(players) * 16 * seconds * 9 // 10
