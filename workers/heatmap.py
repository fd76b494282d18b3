"""Q3 heat maps: per player, the share of game time spent in each pitch cell.

Input: the ``player_average`` streams. Exact rules (docs/q1-q3.md):
- The time between consecutive samples of a player, ``[t_k, t_k+1)``, belongs
  to the cell of the earlier sample; only its game time counts
  (``workers.gametime``), and gaps longer than 1 s count nothing.
- Every grid computes its cell from the position with its own bounds:
  ``ix = floor((x - 0) * nx / 52483)``, ``iy = floor((y + 33960) * ny / 67925)``,
  clamped to the border cells; index ``ix * ny + iy``. (Summing a coarse grid
  from 64x100 would be exact only where 64x100 nests in it: 100 rows do not
  split into 13.)
- Counts are integer ps in per-game-second buckets of touched cells only,
  keyed by a *joint cell* that fixes the sample's cell in every grid
  (``joint_cell``), so one sparse dict serves all grids.
- At every game second ``G = n s`` (n >= 1, once the player's data reaches its
  event time) each window W covers buckets ``[n - W, n)``: ``HM_<w>_<nx>x<ny>_<p>``
  with each cell's share ``count[c] / total`` in parts per million, in the
  compact form of ``workers.sparse_heatmap`` (non-zero cells only).
- A map is emitted only when it differs from the stream's previous tuple (at
  first: from the empty map). Between two tuples the map is the earlier one;
  the stream's watermark says up to which event time that is certain. So a
  player without data, the game time before a short match's first sample and
  a whole-game map in a gap of the data emit nothing.

Two paths give the same bytes (``arrays`` param, default true): the array
path keeps each window's counts per grid cell in numpy vectors
(``workers.gridcounts``); the per-event path (``arrays: false``, the
reference the tests compare with) sums each window's joint cells into every
grid in Python at every emission.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import orjson

from pan.buffers.streams import OutputStream
from pan.buffers.tuples import Tuple
from pan.components.base import ComponentContext
from pan.components.catalog import register
from pan.config.specs import WorkerSpec
from workers.arrays import arrays_param
from workers.debs import PLAYERS, PS_PER_S, WINDOWS, X_MAX, X_MIN, Y_MAX, Y_MIN
from workers.gametime import GAME_SECONDS, pieces, ts_of_game
from workers.gridcounts import GridWindows
from workers.players import PlayerStreamsComponent, check_inputs_match, selected_players, selected_subset
from workers.sparse_heatmap import EMPTY_BODY, encode_body, shares_ppm
from workers.windows import Windows

FINE_X, FINE_Y = 64, 100
GRIDS: dict[str, tuple[int, int]] = {"8x13": (8, 13), "16x25": (16, 25), "32x50": (32, 50), "64x100": (64, 100)}
HM_WINDOWS = ("1min", "5min", "10min", "wholeGame")

X_SPAN = X_MAX - X_MIN
Y_SPAN = Y_MAX - Y_MIN


def grid_cell(x: float, y: float, nx: int, ny: int) -> int:
    """Index ``ix * ny + iy`` of the nx x ny cell holding (x, y) mm; outside clamps to the border."""
    ix = math.floor((x - X_MIN) * nx / X_SPAN)
    iy = math.floor((y - Y_MIN) * ny / Y_SPAN)
    ix = 0 if ix < 0 else nx - 1 if ix >= nx else ix
    iy = 0 if iy < 0 else ny - 1 if iy >= ny else iy
    return ix * ny + iy


def fine_cell(x: float, y: float) -> int:
    """Index of the 64x100 cell holding (x, y) mm."""
    return grid_cell(x, y, FINE_X, FINE_Y)


def joint_cell(x: float, y: float) -> int:
    """``fine * 13 + row13``: the 64x100 cell and the 8x13 row of (x, y), which fix the cell of every grid.

    Three floors instead of eight: the 8, 16 and 32 columns and the 25 and 50
    rows nest in 64 and 100, and in doubles too ``floor((x - X_MIN) * 8 / span)``
    is ``floor((x - X_MIN) * 64 / span) // 8`` (scaling by a power of two is
    exact, so ``fl(64 u / span) = 8 fl(8 u / span)``; likewise 100 = 4 x 25 =
    2 x 50), so each such cell is the one its own bounds give. 13 rows do not
    nest in 100 and get their own floor.
    """
    u = x - X_MIN
    w = y - Y_MIN
    ix = math.floor(u * FINE_X / X_SPAN)
    iy = math.floor(w * FINE_Y / Y_SPAN)
    i13 = math.floor(w * 13 / Y_SPAN)
    ix = 0 if ix < 0 else FINE_X - 1 if ix >= FINE_X else ix
    iy = 0 if iy < 0 else FINE_Y - 1 if iy >= FINE_Y else iy
    i13 = 0 if i13 < 0 else 12 if i13 >= 13 else i13
    return (ix * FINE_Y + iy) * 13 + i13


def joint_to_grid(nx: int, ny: int) -> list[int]:
    """Joint cell -> cell of the nx x ny grid (nx divides 64; ny divides 100 or is 13).

    Built with numpy: every process that loads the components builds eight of these tables of 83,200 cells,
    which a Python loop took 0.1 s of CPU for."""
    fine, i13 = np.divmod(np.arange(FINE_X * FINE_Y * 13), 13)
    ix, iy = np.divmod(fine, FINE_Y)
    row = i13 if ny == 13 else iy // (FINE_Y // ny)
    return (ix // (FINE_X // nx) * ny + row).tolist()


_TABLES = {name: joint_to_grid(nx, ny) for name, (nx, ny) in GRIDS.items()}
assert all(FINE_X % nx == 0 and (FINE_Y % ny == 0 or ny == 13) for nx, ny in GRIDS.values())


def side_by_side_table(grids: list[str]) -> np.ndarray:
    """``table[joint, g]``: the joint cell's cell in grid ``grids[g]``, offset into the grids laid side by side."""
    offset = 0
    columns = []
    for grid in grids:
        columns.append(np.asarray(_TABLES[grid], dtype=np.int64) + offset)
        nx, ny = GRIDS[grid]
        offset += nx * ny
    return np.stack(columns, axis=1)


#: A heat-map tuple as ``encode`` would write it: i, ts, player (JSON), grid, compact cells (``sparse_heatmap``).
_TUPLE = b'{"i":%d,"ts":%d,"player":%b,"grid":"%b",%b}'


def grid_counts(sums: dict[int, int], grid: str) -> np.ndarray:
    """The per-event path: a window's ps per joint cell summed into the cells of ``grid``."""
    nx, ny = GRIDS[grid]
    counts = np.zeros(nx * ny, dtype=np.int64)
    table = _TABLES[grid]
    for key, d in sums.items():
        counts[table[key]] += d
    return counts


class _Player:
    __slots__ = ("cell", "last", "last_ts", "name", "next_n", "second", "streams", "windows")

    def __init__(self, name: str, windows: Windows[int] | GridWindows,
                 streams: list[list[tuple[str, OutputStream]]]) -> None:
        self.name = name
        self.windows = windows
        self.streams = streams  # per window: (grid name, stream)
        self.last = [[EMPTY_BODY] * len(grids) for grids in streams]  # per window and grid: the body last emitted
        self.last_ts: int | None = None
        self.cell = 0  # joint cell of the latest sample
        self.next_n = 1
        self.second = -1  # the game second of the open bucket


@register
class HeatMap(PlayerStreamsComponent):
    """Player samples -> ``HM_<window>_<nx>x<ny>_<player>`` once per game second."""

    type_name = "heatmap"
    state_attributes = (*PlayerStreamsComponent.COUNTERS, "_state", "emitted", "unchanged")
    own_params = ("players", "windows", "grids", "arrays")

    @classmethod
    def main_outputs(cls, spec: WorkerSpec) -> list[str]:
        windows = selected_subset(spec, "windows", HM_WINDOWS)[0]
        grids = selected_subset(spec, "grids", tuple(GRIDS))[0]
        return [f"HM_{w}_{g}_{p}" for p in cls.players(spec) for w in windows for g in grids]

    @classmethod
    def check_own_params(cls, spec: WorkerSpec) -> list[str]:
        problems = selected_players(spec, cls.ALLOWED, PLAYERS)[1]
        problems += selected_subset(spec, "windows", HM_WINDOWS)[1] + selected_subset(spec, "grids", tuple(GRIDS))[1]
        problems += arrays_param(spec)[1]
        return problems + check_inputs_match(spec, cls.input_names(spec))

    def __init__(self, ctx: ComponentContext) -> None:
        super().__init__(ctx)
        windows = selected_subset(ctx.spec, "windows", HM_WINDOWS)[0]
        grids = selected_subset(ctx.spec, "grids", tuple(GRIDS))[0]
        self.arrays = arrays_param(ctx.spec)[0]
        lengths = [WINDOWS[w] for w in windows]
        table = side_by_side_table(grids)
        sizes = [GRIDS[g][0] * GRIDS[g][1] for g in grids]
        self._state: dict[str, _Player] = {}
        for p in self.players(ctx.spec):
            streams = [[(g, ctx.outputs[f"HM_{w}_{g}_{p}"]) for g in grids] for w in windows]
            counted = GridWindows(lengths, table, sizes) if self.arrays else Windows(lengths)
            self._state[p] = _Player(p, counted, streams)
        self.emitted = 0
        self.unchanged = 0  # maps not emitted, as they equal the stream's previous tuple

    def process(self, events: list[Tuple]) -> None:
        for st, ts, x, y, since in self.usable_samples(events, self._state):
            if since is not None:
                windows, cell = st.windows, st.cell
                for g, g_end in pieces(since, ts):
                    n = g // PS_PER_S
                    while st.next_n <= n:
                        self._emit(st)
                    if n != st.second:
                        st.second = n
                        windows.open(n * PS_PER_S, (n + 1) * PS_PER_S)
                    windows.add(cell, g_end - g)
            while st.next_n <= GAME_SECONDS and ts_of_game(st.next_n * PS_PER_S) <= ts:
                self._emit(st)
            st.last_ts = ts
            st.cell = joint_cell(x, y)

    def _emit(self, st: _Player) -> None:
        """Emit every window and grid that changed, for the game second boundary ``st.next_n``, and move on."""
        n = st.next_n
        st.next_n = n + 1
        st.windows.slide(n * PS_PER_S)
        if isinstance(st.windows, GridWindows):
            per_window = [st.windows.bodies(w) for w in range(len(st.streams))]
        else:
            per_window = []
            for w, streams in zip(st.windows, st.streams, strict=True):
                total = sum(w.sums.values())
                per_window.append([encode_body(shares_ppm(grid_counts(w.sums, grid), total)) for grid, _ in streams])
        ts = ts_of_game(n * PS_PER_S)
        name_json = orjson.dumps(st.name)
        for streams, bodies, last in zip(st.streams, per_window, st.last, strict=True):
            for g, ((grid, stream), body) in enumerate(zip(streams, bodies, strict=True)):
                if body == last[g]:
                    self.unchanged += 1
                    continue
                last[g] = body
                stream.extend_encoded([_TUPLE % (stream.next_index, ts, name_json, grid.encode(), body)])
                self.emitted += 1

    def counters(self) -> dict[str, Any]:
        return {
            **super().counters(), "emitted": self.emitted, "unchanged": self.unchanged,
        }
