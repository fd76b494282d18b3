"""Q3 heat maps: cells, attribution, windows, emission points, sums, coarse grids, determinism.

Expected shares are exact fractions of the time, rounded half up to ppm (``ppm``): the documented precision of
the compact form (workers/sparse_heatmap.py). A stream emits a map only when it changed, so the map at a time is
the latest tuple at or before it (``map_at``).
"""

from __future__ import annotations

import math
import random
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from pan.components.testing import build_component, output_tuples
from pan.config.specs import WorkflowError
from tests.support.match_feed import (
    OFFLINE,
    all_outputs,
    feed_in_chunks,
    feed_jittered,
    load_match,
    merged,
    player_stream_of,
)
from workers.debs import FIRST_HALF, PLAYERS, PS_PER_MS, PS_PER_S, SECOND_HALF, X_MAX, X_MIN, Y_MAX, Y_MIN
from workers.heatmap import GRIDS, fine_cell
from workers.sparse_heatmap import PPM, dense, map_at

S1, E1 = FIRST_HALF
S2, E2 = SECOND_HALF
STEP = 20 * PS_PER_MS


def sample(ts: int, x: float, y: float, player: str = "A2") -> dict[str, Any]:
    return {"ts": ts, "player": player, "x": x, "y": y, "z": 0.0, "v": 0.0, "a": 0.0}


def ppm(share: Fraction | int) -> int:
    """An exact share of the window's time (0..1) in ppm, rounded half up."""
    return math.floor(Fraction(share) * PPM + Fraction(1, 2))


def build(**params: Any):
    return build_component("heatmap", {**OFFLINE, **params}, buffer_size=2_000)


def test_fine_cells_and_clamping() -> None:
    assert fine_cell(0, Y_MIN) == 0
    assert fine_cell(X_MAX, Y_MAX) == 64 * 100 - 1
    assert fine_cell(-500.0, 99999.0) == 99 and fine_cell(1e9, -1e9) == 63 * 100
    assert fine_cell(52483 / 64 * 3 + 1, Y_MIN + 67925 / 100 * 7 + 1) == 3 * 100 + 7


def true_cell(x: float, y: float, nx: int, ny: int) -> int:
    """The nx x ny cell holding (x, y) inside the pitch, in exact rational arithmetic (the pitch cut in equal cells)."""
    ix = (Fraction(x) - X_MIN) * nx // (X_MAX - X_MIN)
    iy = (Fraction(y) - Y_MIN) * ny // (Y_MAX - Y_MIN)
    assert 0 <= ix < nx and 0 <= iy < ny
    return int(ix) * ny + int(iy)


def test_joint_cells_give_each_grids_own_cell() -> None:
    """The component keeps one joint cell per sample; it must name the cell each grid's own bounds give."""
    from workers.heatmap import _TABLES, grid_cell, joint_cell

    rnd = random.Random(4)
    points = [(rnd.uniform(-2000, 55000), rnd.uniform(-36000, 36000)) for _ in range(20_000)]
    for nx, ny in GRIDS.values():  # next to every edge of every grid, and on it
        for k in range(nx + 1):
            edge = X_MIN + (X_MAX - X_MIN) * k / nx
            points += [(edge + d, 0.0) for d in (-1e-6, 0.0, 1e-6, -1e-9, 1e-9)]
        for k in range(ny + 1):
            edge = Y_MIN + (Y_MAX - Y_MIN) * k / ny
            points += [(1000.0, edge + d) for d in (-1e-6, 0.0, 1e-6, -1e-9, 1e-9)]
    for grid, (nx, ny) in GRIDS.items():
        table = _TABLES[grid]
        assert all(table[joint_cell(x, y)] == grid_cell(x, y, nx, ny) for x, y in points), grid


def test_every_grid_cuts_the_pitch_with_its_own_bounds() -> None:
    """A player stands 1 s next to each edge of every 8x13 row: each grid finds the cell it stands in (fix 4).

    8x13 cells are 6560 x 5225 mm; 100 rows of 679 mm do not nest in them, so the cell of a 64x100 row's
    centre (what the grid was summed from) misses positions near 13-row edges by up to 340 mm.
    """
    row = Fraction(Y_MAX - Y_MIN, 13)
    spots = [(float(X_MIN + Fraction(X_MAX - X_MIN, 8) * (k % 8 + Fraction(1, 2))), float(Y_MIN + row * (k + f)))
             for k in range(13) for f in (Fraction(1, 50), Fraction(49, 50))]  # 104 mm inside the row's edges
    comp = build(players=["A2"], windows=["wholeGame"])
    samples = [sample(S1 + n * STEP, *spots[n // 50]) for n in range(len(spots) * 50)]
    comp.process([*samples, sample(S1 + len(samples) * STEP, *spots[-1])])
    for grid, (nx, ny) in GRIDS.items():
        cells = dense(output_tuples(comp, f"HM_wholeGame_{grid}_A2")[-1])
        shares = np.zeros(nx * ny, dtype=object)
        for x, y in spots:
            shares[true_cell(x, y, nx, ny)] += Fraction(1, len(spots))
        assert cells.tolist() == [ppm(share) for share in shares], grid


def test_outputs_and_params() -> None:
    comp = build(players=["B3"], windows=["1min"], grids=["8x13", "64x100"])
    assert list(comp.ctx.inputs) == ["B3"]
    assert [s for s in comp.ctx.outputs if not s.endswith("_late")] == ["HM_1min_8x13_B3", "HM_1min_64x100_B3"]
    assert len(build().ctx.outputs) == 16 * 4 * 4 + 1
    for bad in ({"players": []}, {"windows": ["20min"]}, {"grids": ["10x10"]}, {"grids": "8x13"}):
        with pytest.raises(WorkflowError):
            build(**bad)


def test_standing_in_one_cell_is_100_percent_there() -> None:
    comp = build(players=["A2"])
    x, y = 30000.0, 1000.0
    comp.process([sample(S1 - PS_PER_S + n * STEP, x, y) for n in range(91 * 50 + 1)])
    fine = fine_cell(x, y)
    ix, iy = divmod(fine, 100)
    for window in ("1min", "5min", "10min", "wholeGame"):
        for grid, (nx, ny) in GRIDS.items():
            out = output_tuples(comp, f"HM_{window}_{grid}_A2")
            assert [t["ts"] for t in out] == [S1 + PS_PER_S]  # 90 game seconds, one map: it never changes
            cell = true_cell(x, y, nx, ny)
            assert cell == fine if grid == "64x100" else cell == (ix * nx // 64) * ny + iy * ny // 100
            assert out[0]["grid"] == grid and out[0]["runs"] == [cell, 1] and out[0]["ppm"] == [PPM]


def test_time_goes_to_the_earlier_samples_cell_and_windows_slide() -> None:
    comp = build(players=["A2"], windows=["1min", "5min"], grids=["64x100"])
    a, b = (1000.0, -30000.0), (50000.0, 30000.0)
    evs = [sample(S1 + n * STEP, *(a if n < 30 * 50 else b)) for n in range(90 * 50 + 1)]
    comp.process(evs)
    ca, cb = fine_cell(*a), fine_cell(*b)
    five = output_tuples(comp, "HM_5min_64x100_A2")
    one = output_tuples(comp, "HM_1min_64x100_A2")

    def at(tuples: list[dict[str, Any]], second: int) -> np.ndarray:
        return map_at(tuples, S1 + second * PS_PER_S, "64x100")

    # The sample at 30 s is in b: the time from 29.98 s to 30 s still belongs to a.
    assert [t["ts"] for t in five][:2] == [S1 + PS_PER_S, S1 + 31 * PS_PER_S]  # all in a until 30 s: one map
    assert at(five, 30)[ca] == PPM
    assert at(five, 31)[cb] == ppm(Fraction(1, 31))
    assert at(five, 90)[ca] == ppm(Fraction(30, 90)) and at(five, 90)[cb] == ppm(Fraction(60, 90))
    assert at(one, 75)[ca] == ppm(Fraction(15, 60))  # seconds 15..74
    assert at(one, 90)[cb] == PPM and at(one, 90)[ca] == 0
    assert [t["ts"] for t in one][-1] == S1 + 90 * PS_PER_S  # [30 s, 90 s): the first window all in b


def test_emission_points_across_the_break_and_only_game_time() -> None:
    comp = build(players=["A2"], windows=["1min", "wholeGame"], grids=["8x13"])
    a, b = (1000.0, -30000.0), (50000.0, 30000.0)
    evs = [sample(E1 - 3 * PS_PER_S + n * STEP, *a) for n in range(6 * 50)]  # to 3 s after the half
    evs += [sample(S2 - 2 * PS_PER_S + n * STEP, *b) for n in range(5 * 50)]  # gap > 1 s: the break
    comp.process(evs)
    whole = output_tuples(comp, "HM_wholeGame_8x13_A2")
    # nothing before the data; then all in a up to the break (one map), and two changes after it
    assert [t["ts"] for t in whole] == [E1 - 2 * PS_PER_S, S2 + PS_PER_S, S2 + 2 * PS_PER_S]
    a8, b8 = true_cell(*a, 8, 13), true_cell(*b, 8, 13)
    assert map_at(whole, E1, "8x13")[a8] == PPM  # E1 - 3 s .. E1
    assert dense(whole[-1])[a8] == ppm(Fraction(3, 5)) and dense(whole[-1])[b8] == ppm(Fraction(2, 5))
    one = output_tuples(comp, "HM_1min_8x13_A2")
    assert dense(one[-1])[a8] == ppm(Fraction(3, 5))  # the window spans the break in game time


def test_bad_samples_are_counted_not_fatal() -> None:
    comp = build(players=["A2"], windows=["wholeGame"], grids=["8x13"])
    good = [sample(S1 + n * STEP, 100.0, 100.0) for n in range(60)]
    comp.process([
        *good[:5], {"ts": S1, "player": "A2"}, {**good[5], "x": "1"}, {**good[5], "y": float("inf")},
        {**good[5], "ts": 1.5}, {**good[5], "player": "nobody"}, {**good[5], "player": None}, good[2], *good[5:],
    ])
    c = comp.counters()
    assert (c["bad"], c["foreign"], c["out_of_order"]) == (4, 2, 1)
    assert dense(output_tuples(comp, "HM_wholeGame_8x13_A2")[0])[true_cell(100, 100, 8, 13)] == PPM


def random_walk(seed: int, players: list[str], seconds: int) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    out = []
    for p in players:
        x, y = rnd.uniform(0, 52483), rnd.uniform(-33960, 33965)
        for n in range(seconds * 50):
            x += rnd.gauss(0, 300)
            y += rnd.gauss(0, 300)
            if rnd.random() < 0.01:
                continue
            out.append(sample(S1 - PS_PER_S + n * STEP, x, y, p))
    out.sort(key=lambda s: s["ts"])
    return out


def check_maps(streams: dict[str, list[dict[str, Any]]], player: str, windows: list[str]) -> int:
    """At every game second with a map: shares sum to 1 whenever time counted, and where cells nest (all columns;
    25 and 50 rows in 100) a coarse grid equals the summed fine grid (8x13 by columns only: 100 rows do not nest
    in 13), each within the rounding to ppm: half a ppm per rounded cell. Returns the seconds checked."""
    checked = 0
    for w in windows:
        seconds = sorted({t["ts"] for grid in GRIDS for t in streams[f"HM_{w}_{grid}_{player}"]})
        fine = np.array([map_at(streams[f"HM_{w}_64x100_{player}"], ts, "64x100") for ts in seconds])
        fine = fine.reshape(-1, 64, 100)
        nonzero = fine != 0
        for grid, (nx, ny) in GRIDS.items():
            rows = streams[f"HM_{w}_{grid}_{player}"]
            coarse = np.array([map_at(rows, ts, grid) for ts in seconds]).reshape(-1, nx, ny)
            totals = coarse.sum(axis=(1, 2))
            cells = (coarse != 0).sum(axis=(1, 2))
            assert np.all((totals == 0) | (np.abs(totals - PPM) <= cells / 2)), grid
            if grid == "64x100":
                continue
            columns = (len(fine), nx, 64 // nx, 100)
            by_columns, used = fine.reshape(columns).sum(axis=2), nonzero.reshape(columns).sum(axis=2)
            if 100 % ny == 0:
                rows_in = (len(fine), nx, ny, 100 // ny)
                summed, counted = by_columns.reshape(rows_in).sum(axis=3), used.reshape(rows_in).sum(axis=3)
                assert np.all(np.abs(coarse - summed) <= (1 + counted) / 2), grid
            column_cells = (coarse != 0).sum(axis=2) + used.sum(axis=2)
            assert np.all(np.abs(coarse.sum(axis=2) - by_columns.sum(axis=2)) <= column_cells / 2), grid
            checked += len(seconds)
    return checked


def test_random_walk_sums_and_coarse_grids() -> None:
    comp = build(players=["B5"])
    comp.process(random_walk(5, ["B5"], 130))
    assert check_maps(all_outputs(comp), "B5", ["1min", "5min", "10min", "wholeGame"]) == 4 * 3 * 128


def test_same_outputs_whatever_the_batching_and_arrival_jitter() -> None:
    samples = random_walk(9, ["A1", "B8"], 40)
    runs = []
    for seed, delay_ms, batch in ((0, 0, 1), (1, 250, 9), (2, 600, 70)):
        comp = build_component("heatmap", {"players": ["A1", "B8"], "grids": ["16x25", "64x100"],
                                           "initial_k": 3 * PS_PER_S, "window": 10**9}, buffer_size=20_000)
        feed_jittered(comp, samples, player_stream_of, seed, delay_ms * PS_PER_MS, batch)
        assert comp.counters()["ordering"]["late"] == 0
        runs.append(all_outputs(comp))
    assert runs[0] == runs[1] == runs[2]
    assert len(runs[0]["HM_1min_64x100_B8"]) == 38


@pytest.fixture(scope="session")
def match(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return load_match(tmp_path_factory)


@pytest.mark.process
def test_generated_match(match: dict[str, Any]) -> None:
    players = ["A1", "A5", "B7"]
    samples = merged(match["player_streams"], players)
    comp = build_component("heatmap", {**OFFLINE, "players": players}, buffer_size=1000)
    feed_in_chunks(comp, samples, player_stream_of, PS_PER_S)
    streams = all_outputs(comp)
    seconds = (max(t["ts"] for t in samples) - S1) // PS_PER_S  # heat maps up to the last sample
    c = comp.counters()
    assert c["emitted"] + c["unchanged"] == len(players) * 16 * seconds  # a map at every boundary, sent or not
    assert c["emitted"] == sum(len(tuples) for tuples in streams.values())
    for p in players:
        whole = streams[f"HM_wholeGame_64x100_{p}"]
        assert whole[-1]["ts"] <= S1 + seconds * PS_PER_S and len(whole) > seconds * 9 // 10  # a player moves
        assert check_maps(streams, p, ["1min", "wholeGame"]) >= 2 * 3 * len(whole)
    assert c["bad"] == c["foreign"] == c["gaps"] == 0
    assert PLAYERS  # all 16 are covered by the running test; three keep this one quick
