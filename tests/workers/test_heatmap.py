"""Q3 heat maps: cells, attribution, windows, emission points, sums, coarse grids, determinism."""

from __future__ import annotations

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

S1, E1 = FIRST_HALF
S2, E2 = SECOND_HALF
STEP = 20 * PS_PER_MS


def sample(ts: int, x: float, y: float, player: str = "A2") -> dict[str, Any]:
    return {"ts": ts, "player": player, "x": x, "y": y, "z": 0.0, "v": 0.0, "a": 0.0}


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
        cells = output_tuples(comp, f"HM_wholeGame_{grid}_A2")[-1]["cells"]
        expected = np.zeros(nx * ny)
        for x, y in spots:
            expected[true_cell(x, y, nx, ny)] += 100 / len(spots)
        assert np.abs(np.array(cells) - expected).max() <= 1e-9, grid


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
            assert [t["ts"] for t in out] == [S1 + n * PS_PER_S for n in range(1, 91)]
            cell = true_cell(x, y, nx, ny)
            assert cell == fine if grid == "64x100" else cell == (ix * nx // 64) * ny + iy * ny // 100
            for t in out:
                assert len(t["cells"]) == nx * ny and t["cells"][cell] == 100.0 and sum(t["cells"]) == 100.0


def test_time_goes_to_the_earlier_samples_cell_and_windows_slide() -> None:
    comp = build(players=["A2"], windows=["1min", "5min"], grids=["64x100"])
    a, b = (1000.0, -30000.0), (50000.0, 30000.0)
    evs = [sample(S1 + n * STEP, *(a if n < 30 * 50 else b)) for n in range(90 * 50 + 1)]
    comp.process(evs)
    ca, cb = fine_cell(*a), fine_cell(*b)
    five = {t["ts"]: t["cells"] for t in output_tuples(comp, "HM_5min_64x100_A2")}
    one = {t["ts"]: t["cells"] for t in output_tuples(comp, "HM_1min_64x100_A2")}
    # The sample at 30 s is in b: the time from 29.98 s to 30 s still belongs to a.
    assert five[S1 + 30 * PS_PER_S][ca] == 100.0
    assert five[S1 + 31 * PS_PER_S][cb] == 100 / 31
    assert five[S1 + 90 * PS_PER_S][ca] == 30 / 90 * 100 and five[S1 + 90 * PS_PER_S][cb] == 60 / 90 * 100
    assert one[S1 + 75 * PS_PER_S][ca] == 15 / 60 * 100  # seconds 15..74
    assert one[S1 + 90 * PS_PER_S][cb] == 100.0 and one[S1 + 90 * PS_PER_S][ca] == 0.0


def test_emission_points_across_the_break_and_only_game_time() -> None:
    comp = build(players=["A2"], windows=["1min", "wholeGame"], grids=["8x13"])
    a, b = (1000.0, -30000.0), (50000.0, 30000.0)
    evs = [sample(E1 - 3 * PS_PER_S + n * STEP, *a) for n in range(6 * 50)]  # to 3 s after the half
    evs += [sample(S2 - 2 * PS_PER_S + n * STEP, *b) for n in range(5 * 50)]  # gap > 1 s: the break
    comp.process(evs)
    whole = output_tuples(comp, "HM_wholeGame_8x13_A2")
    ts = [t["ts"] for t in whole]
    assert ts[0] == S1 + PS_PER_S and ts[1803] == E1 and ts[1804:] == [S2 + PS_PER_S, S2 + 2 * PS_PER_S]
    assert all(sum(t["cells"]) == 0.0 for t in whole[:1801])  # nothing counted before the data
    a8, b8 = true_cell(*a, 8, 13), true_cell(*b, 8, 13)
    assert whole[1803]["cells"][a8] == 100.0  # E1 - 3 s .. E1
    assert whole[-1]["cells"][a8] == 3 / 5 * 100 and whole[-1]["cells"][b8] == 2 / 5 * 100
    one = output_tuples(comp, "HM_1min_8x13_A2")
    assert one[-1]["cells"][a8] == 60.0  # the window spans the break in game time


def test_bad_samples_are_counted_not_fatal() -> None:
    comp = build(players=["A2"], windows=["wholeGame"], grids=["8x13"])
    good = [sample(S1 + n * STEP, 100.0, 100.0) for n in range(60)]
    comp.process([
        *good[:5], {"ts": S1, "player": "A2"}, {**good[5], "x": "1"}, {**good[5], "y": float("inf")},
        {**good[5], "ts": 1.5}, {**good[5], "player": "nobody"}, {**good[5], "player": None}, good[2], *good[5:],
    ])
    c = comp.counters()
    assert (c["bad"], c["foreign"], c["out_of_order"]) == (4, 2, 1)
    assert output_tuples(comp, "HM_wholeGame_8x13_A2")[0]["cells"][true_cell(100, 100, 8, 13)] == 100.0


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
    """Sums are 100 whenever time counted; where cells nest (all columns; 25 and 50 rows in 100) a coarse grid
    equals the summed fine grid (8x13 by columns only: 100 rows do not nest in 13)."""
    checked = 0
    for w in windows:
        fine_rows = streams[f"HM_{w}_64x100_{player}"]
        fine = np.array([t["cells"] for t in fine_rows]).reshape(-1, 64, 100)
        for grid, (nx, ny) in GRIDS.items():
            if grid == "64x100":
                continue
            rows = streams[f"HM_{w}_{grid}_{player}"]
            assert [t["ts"] for t in rows] == [t["ts"] for t in fine_rows]
            coarse = np.array([t["cells"] for t in rows]).reshape(-1, nx, ny)
            by_columns = fine.reshape(len(fine), nx, 64 // nx, 100).sum(axis=2)
            if 100 % ny == 0:
                summed = by_columns.reshape(len(fine), nx, ny, 100 // ny).sum(axis=3)
                assert np.abs(coarse - summed).max() <= 1e-9
            assert np.abs(coarse.sum(axis=2) - by_columns.sum(axis=2)).max() <= 1e-9
            totals = coarse.sum(axis=(1, 2))
            assert np.all((totals == 0.0) | (np.abs(totals - 100.0) <= 1e-6))
            checked += len(rows)
        totals = fine.sum(axis=(1, 2))
        assert np.all((totals == 0.0) | (np.abs(totals - 100.0) <= 1e-6))
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
    for p in players:
        assert len(streams[f"HM_wholeGame_64x100_{p}"]) == seconds
        assert check_maps(streams, p, ["1min", "wholeGame"]) == 2 * 3 * seconds
    c = comp.counters()
    assert c["bad"] == c["foreign"] == c["gaps"] == 0
    assert PLAYERS  # all 16 are covered by the running test; three keep this one quick


@pytest.mark.parametrize("size", [1, 104, 6400])
def test_cells_are_encoded_exactly_as_orjson_writes_the_full_list(size: int) -> None:
    import random

    import orjson

    from workers.heatmap import encode_cells

    rng = random.Random(size)
    for touched in (0, 1, size // 7, size):
        shares = {c: rng.random() * 10 ** rng.randint(-14, 2) for c in rng.sample(range(size), touched)}
        full = [0.0] * size
        for c, v in shares.items():
            full[c] = v
        assert encode_cells(shares, size) == orjson.dumps(full)
