"""The compact heat-map form: runs and values round-trip to the dense grid, shares round to the nearest ppm."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from workers.sparse_heatmap import EMPTY_BODY, PPM, dense, dense_percent, encode_body, map_at, shares_ppm


def tuple_of(body: bytes, grid: str) -> dict:
    return orjson.loads(b'{"ts":1,"grid":"%b",%b}' % (grid.encode(), body))


@given(st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=300))
def test_dense_undoes_encode_body(values: list[int]) -> None:
    ppm = np.array([0, 1, 7, 999_999], dtype=np.int64)[np.array(values)]
    t = tuple_of(encode_body(ppm), f"1x{len(values)}")
    assert dense(t).tolist() == ppm.tolist()
    runs = t["runs"]
    starts, lengths = runs[0::2], runs[1::2]
    assert all(length > 0 for length in lengths) and sum(lengths) == len(t["ppm"]) == int(np.count_nonzero(ppm))
    # maximal runs: two runs never touch, so no shorter form of the same cells exists
    assert all(s + n < nxt for s, n, nxt in zip(starts, lengths, starts[1:], strict=False))


def test_an_empty_map_is_the_empty_body() -> None:
    assert encode_body(np.zeros(104, dtype=np.int64)) == EMPTY_BODY
    assert dense(tuple_of(EMPTY_BODY, "8x13")).tolist() == [0] * 104
    assert shares_ppm(np.zeros(5, dtype=np.int64), 0).tolist() == [0] * 5


def test_shares_are_the_exact_quotient_rounded_half_up() -> None:
    """Against exact rational arithmetic; the float64 steps may differ only within 1e-6 ppm of a half."""
    rng = random.Random(7)
    near_half = 0
    for _ in range(2000):
        counts = [rng.randrange(0, 10 ** rng.randint(1, 15)) for _ in range(rng.randint(1, 40))]
        total = sum(counts) + rng.randrange(0, 3)
        if not total:
            continue
        got = shares_ppm(np.array(counts, dtype=np.int64), total).tolist()
        for c, g in zip(counts, got, strict=True):
            exact = Fraction(c, total) * PPM
            if abs(exact - math.floor(exact) - Fraction(1, 2)) < Fraction(1, 10**6):
                near_half += 1
                assert g in (math.floor(exact), math.ceil(exact))
            else:
                assert g == math.floor(exact + Fraction(1, 2)), (c, total)
    assert near_half < 100


def test_percent_and_the_map_at_a_time() -> None:
    grid = "2x3"
    first = tuple_of(encode_body(np.array([0, 250_000, 750_000, 0, 0, 0])), grid) | {"ts": 10}
    second = tuple_of(encode_body(np.array([0, 0, 0, 0, 0, PPM])), grid) | {"ts": 20}
    assert dense_percent(first).tolist() == [0.0, 25.0, 75.0, 0.0, 0.0, 0.0]
    assert map_at([first, second], 9, grid).tolist() == [0] * 6
    stream = [first, second]
    assert map_at(stream, 10, grid).tolist() == map_at(stream, 19, grid).tolist() == dense(first).tolist()
    assert map_at([first, second], 10**9, grid).tolist() == [0, 0, 0, 0, 0, PPM]


@pytest.mark.parametrize(("runs", "values", "message"), [
    ([0], [1], "pairs"),
    ([5, 2], [1, 1], "does not fit"),
    ([0, 2], [1], "does not fit"),
    ([0, 1], [1, 2], "2 values for 1 cells"),
    ([-1, 1], [1], "does not fit"),
])
def test_a_malformed_map_is_refused_with_its_fault(runs: list[int], values: list[int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dense({"grid": "2x3", "runs": runs, "ppm": values})
