"""Q3 heat maps: cells, attribution, windows, emission points, sums, coarse grids, determinism."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from pan.workflow import WorkflowError
from tests.harness import build_component, output_tuples
from tests.match_feed import OFFLINE, all_outputs, feed_in_chunks, feed_jittered, load_match, merged, player_stream_of
from workers.debs import FIRST_HALF, PLAYERS, PS_PER_MS, PS_PER_S, SECOND_HALF, X_MAX, Y_MAX, Y_MIN
from workers.heatmap import GRIDS, coarse_map, fine_cell

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


def test_coarse_maps() -> None:
    assert coarse_map(32, 50) == [(ix // 2) * 50 + iy // 2 for ix in range(64) for iy in range(100)]
    assert coarse_map(16, 25) == [(ix // 4) * 25 + iy // 4 for ix in range(64) for iy in range(100)]
    m = coarse_map(8, 13)
    sizes = [m.count(c) for c in range(8 * 13)]
    assert set(sizes) == {7 * 8, 8 * 8}  # each coarse cell: 8 fine columns x 7 or 8 fine rows
    rows = [m[iy] for iy in range(100)]
    assert rows == sorted(rows) and rows[0] == 0 and rows[-1] == 12


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
            cell = coarse_map(nx, ny)[fine] if (nx, ny) != (64, 100) else fine
            assert cell == (ix * nx // 64) * ny + (iy * ny * 2 + 1) // 200 or ny == 13
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
    a8, b8 = coarse_map(8, 13)[fine_cell(*a)], coarse_map(8, 13)[fine_cell(*b)]
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
    assert output_tuples(comp, "HM_wholeGame_8x13_A2")[0]["cells"][coarse_map(8, 13)[fine_cell(100, 100)]] == 100.0


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
    """Sums are 100 whenever time counted, and coarse grids equal the summed fine grid."""
    checked = 0
    maps = {g: np.array(coarse_map(nx, ny)) for g, (nx, ny) in GRIDS.items() if g != "64x100"}
    for w in windows:
        fine_rows = streams[f"HM_{w}_64x100_{player}"]
        fine = np.array([t["cells"] for t in fine_rows])
        for grid, mapping in maps.items():
            rows = streams[f"HM_{w}_{grid}_{player}"]
            assert [t["ts"] for t in rows] == [t["ts"] for t in fine_rows]
            coarse = np.array([t["cells"] for t in rows])
            summed = np.stack([np.bincount(mapping, weights=f, minlength=coarse.shape[1]) for f in fine])
            assert np.abs(coarse - summed).max() <= 1e-9
            totals = coarse.sum(axis=1)
            assert np.all((totals == 0.0) | (np.abs(totals - 100.0) <= 1e-6))
            checked += len(rows)
        totals = fine.sum(axis=1)
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


def test_generated_match(match: dict[str, Any]) -> None:
    players = ["A1", "A5", "B7"]
    samples = merged(match["player_streams"], players)
    comp = build_component("heatmap", {**OFFLINE, "players": players}, buffer_size=1000)
    feed_in_chunks(comp, samples, player_stream_of, PS_PER_S)
    streams = all_outputs(comp)
    seconds = (match["last_ts"] - S1) // PS_PER_S
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
