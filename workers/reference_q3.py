"""Batch reference for Q3 (heat maps).

Spark computes, per player and game second, the picoseconds spent in each
*joint cell* (docs/q1-q3.md: the interval's earlier sample's cell, pieces cut
at game seconds): the sample's cell in every grid, each computed from the
position with that grid's own bounds, packed into one long. The emission at game second n of window W is then a pure
function of those buckets: the sum over buckets ``[n - W, n)`` (``[0, n)`` for
the whole game), for every n from 1 up to the last boundary the player's data
reaches. That last step is a dense sliding sum over at most 3597 buckets per
player: done per player with numpy prefix sums (integer, exact), then the
shares in ppm through ``workers.sparse_heatmap.shares_ppm``, the rounding the
component uses, keeping only the maps that differ from the stream's previous one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from workers.debs import PS_PER_S, WINDOWS, X_MAX, X_MIN, Y_MAX, Y_MIN
from workers.reference_time import GAME_SECONDS, L1, S1, S2, intervals, parts, piece_columns
from workers.sparse_heatmap import runs_and_values, shares_ppm

GRIDS: dict[str, tuple[int, int]] = {"8x13": (8, 13), "16x25": (16, 25), "32x50": (32, 50), "64x100": (64, 100)}
HM_WINDOWS = ("1min", "5min", "10min", "wholeGame")


def cell_column(nx: int, ny: int) -> Any:
    """nx x ny cell index of (x, y) mm: floor of ``(x - X_MIN) * nx / span`` in doubles, clamped."""
    from pyspark.sql import functions as F

    ix = F.floor((F.col("x") - F.lit(float(X_MIN))) * F.lit(float(nx)) / F.lit(float(X_MAX - X_MIN)))
    iy = F.floor((F.col("y") - F.lit(float(Y_MIN))) * F.lit(float(ny)) / F.lit(float(Y_MAX - Y_MIN)))
    ix = F.least(F.greatest(ix, F.lit(0)), F.lit(nx - 1))
    iy = F.least(F.greatest(iy, F.lit(0)), F.lit(ny - 1))
    return ix * ny + iy


def joint_cell_column() -> Any:
    """The cells of all grids (in ``GRIDS`` order) as one long: digits in base nx*ny, the first grid highest."""
    key = None
    for nx, ny in GRIDS.values():
        key = cell_column(nx, ny) if key is None else key * (nx * ny) + cell_column(nx, ny)
    return key


def grid_cells(joint: np.ndarray, grid: str) -> np.ndarray:
    """The ``grid`` cells of joint cell keys."""
    below = 1
    for name, (nx, ny) in reversed(GRIDS.items()):
        if name == grid:
            return joint // below % (nx * ny)
        below *= nx * ny
    raise KeyError(grid)


def cell_seconds(samples: Any, players: list[str]) -> Any:
    """(player, n, cell, d): ps spent in each joint cell during game second n."""
    from pyspark.sql import functions as F

    from_players = samples.where(F.col("player").isin(players)).withColumn("cell", joint_cell_column())
    pt = parts(intervals(from_players, ["cell"]))
    pc = pt.select("player", "cell", F.explode(piece_columns()).alias("p")).select("player", "cell", "p.*")
    return pc.groupBy("player", "n", "cell").agg(F.sum("d").alias("d"))


def ts_of_game_second(n: int) -> int:
    """Event time of the game-second boundary n (the first half's end for n = L1)."""
    g = n * PS_PER_S
    return S1 + g if g <= L1 else S2 + g - L1


def boundaries_reached(last_ts: int) -> int:
    """How many boundaries n = 1, 2, … a player whose last sample is at ``last_ts`` emits."""
    lo, hi = 0, GAME_SECONDS  # largest n with ts_of_game_second(n) <= last_ts
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ts_of_game_second(mid) <= last_ts:
            lo = mid
        else:
            hi = mid - 1
    return lo


def heatmap_rows(player: str, emissions: int, buckets: list[tuple[int, int, int]], windows: list[str],
                 grids: list[str], chunk: int = 240) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """(stream, ts, compact map) of one player in stream-then-ts order; ``buckets`` = (n, joint cell, d).

    Only the maps that differ from the stream's previous one (at first: from the empty map) are given.
    """
    if emissions <= 0:
        return
    used = sorted({c for _, c, _ in buckets})
    col = {c: j for j, c in enumerate(used)}
    per_second = np.zeros((emissions, len(used)), dtype=np.int64)
    for n, c, d in buckets:
        if n < emissions:
            per_second[n, col[c]] += d
    prefix = np.zeros((emissions + 1, len(used)), dtype=np.int64)
    np.cumsum(per_second, axis=0, out=prefix[1:])
    used_arr = np.array(used, dtype=np.int64)
    ts = [ts_of_game_second(n) for n in range(1, emissions + 1)]
    for window in windows:
        length = WINDOWS[window]
        upper = np.arange(1, emissions + 1)
        lower = np.zeros(emissions, dtype=np.int64) if length is None else np.maximum(upper - length // PS_PER_S, 0)
        counts = prefix[upper] - prefix[lower]  # (emissions, used): ps per fine cell in [n - W, n)
        total = counts.sum(axis=1)
        for grid in grids:
            nx, ny = GRIDS[grid]
            stream = f"HM_{window}_{grid}_{player}"
            target = grid_cells(used_arr, grid)
            previous = np.zeros(nx * ny, dtype=np.int64)
            for start in range(0, emissions, chunk):
                stop = min(start + chunk, emissions)
                block = np.zeros((stop - start, nx * ny), dtype=np.int64)
                if target.size:
                    np.add.at(block, (slice(None), target), counts[start:stop])
                for k in range(stop - start):
                    ppm = shares_ppm(block[k], int(total[start + k]))
                    if np.array_equal(ppm, previous):
                        continue
                    previous = ppm
                    runs, values = runs_and_values(ppm)
                    yield stream, ts[start + k], {"grid": grid, "runs": runs.tolist(), "ppm": values.tolist()}
