"""Active ball: which of the transmitting balls is the one in play (DESIGN §6).

All balls transmit all the time; spare balls lie beside the pitch or are being
carried back. The ball in play is the one inside the pitch. The rule, applied
to the ts-ordered merge of the ball streams, is:

* A ball is *inside* while ``debs.in_pitch(x, y)`` holds (lines count as inside).
* With no current ball, the first row (in ts order) of a ball inside the pitch
  makes that ball the active ball.
* The active ball stays active while it is inside, even if another ball is
  inside too (hysteresis: a spare ball rolling onto the pitch changes nothing).
* The active ball's first row outside the pitch is still emitted (the *exit
  row*), then there is no active ball until a ball is inside again. Consumers
  recognise "the ball left the pitch" as an ACTIVEBALL row that is not
  ``in_pitch``; every other ACTIVEBALL row is inside.
* With ``game_time_only`` (default), rows outside the two halves are ignored
  and the state is reset, so warm-up balls before kick-off or in the break
  never count as play.
* Only the balls of the half are in play: 4, 8 and 10 until the second
  kick-off, 4, 8, 10 and 12 from it on (``debs.BALLS_FIRST_HALF``,
  ``debs.BALLS_SECOND_HALF``). A row of another ball (ball 12 in the first
  half or the break) is ignored like a foreign sensor's: it neither becomes
  active nor resets the state; it is counted as ``off_half_rows``.

Every row of the active ball is emitted at its full rate (2000 Hz): the hit
and shot detectors need every sample of a kick's |a| spike, and one full-rate
stream is cheaper for them than re-deciding the active ball from four raw ones.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from pan.buffers.tuples import Tuple
from pan.components.catalog import register
from pan.components.ordered import OrderedComponent
from pan.config.specs import WorkerSpec
from pan.wire.int_csv import IntCsvLayout, render_indexed
from workers import debs
from workers.arrays import PARAM as ARRAYS
from workers.arrays import ArrayPath, arrays_param

OUTPUT = "ACTIVEBALL"
FIELDS = ("ts", "sid", "x", "y", "z", "v", "a", "vx", "vy", "vz", "ax", "ay", "az")
#: An output tuple as the array path writes it: the JSON of the dict the per-event path emits, with its index.
OUTPUT_LAYOUT = IntCsvLayout(FIELDS, key_column=1, ts_column=0)


def ball_list(spec: WorkerSpec) -> list[int]:
    return list(spec.params.get("balls", debs.BALLS))


def finite_sum(row: dict[str, Any]) -> float:
    """0 when every value field is a finite number, NaN otherwise; TypeError for non-numbers.

    One chain of additions is much cheaper per row than eleven type checks:
    strings, None and lists fail the subtraction, NaN and infinities survive
    as NaN.
    """
    total = (row["x"] + row["y"] + row["z"] + row["v"] + row["a"] + row["vx"] + row["vy"] + row["vz"]
             + row["ax"] + row["ay"] + row["az"])
    return total - total


@register
class ActiveBall(ArrayPath, OrderedComponent):
    """Emits the rows of the ball in play; see the module docstring for the rule."""

    ROW_FIELDS = FIELDS
    COLUMN_INPUTS = True
    ARRAYS_DEFAULT = False
    MIN_ARRAY_ROWS = 256  # tables of row ids: the array path from here on (`pan bench arrays`)

    type_name = "active_ball"
    state_attributes = ("active", "bad", "other_sid", "off_half", "outside_game", "switches", "exits", "emitted",
                        "rows_on_arrays")
    own_params: ClassVar[tuple[str, ...]] = ("balls", "game_time_only", ARRAYS)

    @classmethod
    def input_names(cls, spec: WorkerSpec) -> list[str]:
        if spec.inputs:
            return list(spec.inputs)
        balls = spec.params.get("balls", debs.BALLS)
        if not isinstance(balls, list | tuple):
            return [debs.sensor_stream(b) for b in debs.BALLS]
        return [debs.sensor_stream(b) for b in balls]

    @classmethod
    def main_outputs(cls, spec: WorkerSpec) -> list[str]:
        return [OUTPUT]

    @classmethod
    def check_own_params(cls, spec: WorkerSpec) -> list[str]:
        problems = []
        balls = spec.params.get("balls", debs.BALLS)
        if not isinstance(balls, list | tuple) or not balls or not all(type(b) is int for b in balls):
            problems.append(f"balls: must be a non-empty list of sensor ids, got {balls!r}")
        if not isinstance(spec.params.get("game_time_only", True), bool):
            problems.append("game_time_only: must be true or false")
        return problems + arrays_param(spec)[1]

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self.balls = frozenset(ball_list(ctx.spec))
        #: balls that may be in play before the second kick-off / from it on
        self.first_half_balls = self.balls & frozenset(debs.BALLS_FIRST_HALF)
        self.second_half_balls = self.balls & frozenset(debs.BALLS_SECOND_HALF)
        self.game_time_only: bool = self.params.get("game_time_only", True)
        self.output = ctx.outputs[OUTPUT]
        self.active: int | None = None
        self.bad = 0
        self.other_sid = 0
        self.off_half = 0
        self.outside_game = 0
        self.switches = 0
        self.exits = 0
        self.emitted = 0
        self.arrays = arrays_param(ctx.spec, default=self.ARRAYS_DEFAULT)[0]
        self.rows_on_arrays = 0

    def _process_table(self, table: np.ndarray) -> None:
        """The array path: which rows count, and where the active ball changes, found with masks; the
        rule's state changes only at activations, exits and resets, so the loop runs once per change."""
        ts, sid, x, y = table[:, 0], table[:, 1], table[:, 2], table[:, 3]
        known = np.isin(sid, np.array(sorted(self.balls), dtype=np.int64))
        self.other_sid += int(len(sid) - known.sum())
        first = np.isin(sid, np.array(sorted(self.first_half_balls), dtype=np.int64))
        second = np.isin(sid, np.array(sorted(self.second_half_balls), dtype=np.int64))
        off = known & ~np.where(ts < debs.SECOND_HALF[0], first, second)
        self.off_half += int(off.sum())
        counted = known & ~off
        resets = np.zeros(len(ts), dtype=bool)
        if self.game_time_only:
            (h1_start, h1_end), (h2_start, h2_end) = debs.FIRST_HALF, debs.SECOND_HALF
            resets = counted & ~(((h1_start <= ts) & (ts <= h1_end)) | ((h2_start <= ts) & (ts <= h2_end)))
            self.outside_game += int(resets.sum())
        counted &= ~resets
        inside = (x >= debs.X_MIN) & (x <= debs.X_MAX) & (y >= debs.Y_MIN) & (y <= debs.Y_MAX)
        reset_at = np.flatnonzero(resets)
        enter_at = np.flatnonzero(counted & inside)
        rows_of = {b: np.flatnonzero(counted & (sid == b)) for b in self.balls}
        exits_of = {b: np.flatnonzero(counted & (sid == b) & ~inside) for b in self.balls}
        n = len(ts)
        emitted: list[np.ndarray] = []
        active, i = self.active, 0
        while i < n:
            reset = _next(reset_at, i, n)
            if active is None:
                k = _next(enter_at, i, n)
                if k < reset:
                    active = int(sid[k])
                    self.switches += 1
                    emitted.append(np.array([k]))
                    i = k + 1
                    continue
            else:
                exit_row = _next(exits_of[active], i, n)
                stop = min(exit_row, reset)
                rows = rows_of[active]
                emitted.append(rows[np.searchsorted(rows, i):np.searchsorted(rows, stop)])
                if exit_row < reset:
                    emitted.append(np.array([exit_row]))  # the exit row is still emitted
                    self.exits += 1
                    active = None
                    i = exit_row + 1
                    continue
            active = None if reset < n else active
            i = reset + 1
        self.active = active
        if emitted:
            chosen = np.concatenate(emitted)
            if len(chosen):
                self.emitted += len(chosen)
                self._emit_rows(table[chosen])

    def _emit_rows(self, rows: np.ndarray) -> None:
        """Rows of ``FIELDS`` onto the output, rendered from the numbers (no dict per row)."""
        start = self.output.next_index
        indexed = np.empty((len(rows), 1 + len(FIELDS)), dtype=np.int64)
        indexed[:, 0] = np.arange(start, start + len(rows))
        indexed[:, 1:] = rows
        self.output.extend_encoded(render_indexed(OUTPUT_LAYOUT, indexed))

    def _process_events(self, events: list[Tuple]) -> None:
        """The per-event path (and the array path's for a batch with a row that is not all ints)."""
        out: list[dict[str, Any]] = []
        balls = self.balls
        first_balls, second_balls = self.first_half_balls, self.second_half_balls
        game_only = self.game_time_only
        h1_start, h1_end = debs.FIRST_HALF
        h2_start, h2_end = debs.SECOND_HALF
        x_min, x_max, y_min, y_max = debs.X_MIN, debs.X_MAX, debs.Y_MIN, debs.Y_MAX
        active = self.active
        for ev in events:
            try:
                sid = ev["sid"]
                ts = ev["ts"]
                x = ev["x"]
                y = ev["y"]
                inside = x_min <= x <= x_max and y_min <= y <= y_max
                known = sid in balls
            except (KeyError, TypeError):
                self.bad += 1
                continue
            if not known:
                self.other_sid += 1
                continue
            if type(ts) is not int:
                self.bad += 1
                continue
            if sid not in (first_balls if ts < h2_start else second_balls):
                self.off_half += 1
                continue
            if game_only and not (h1_start <= ts <= h1_end or h2_start <= ts <= h2_end):
                self.outside_game += 1
                active = None
                continue
            if active is None:
                if not inside:
                    continue
            elif sid != active:
                continue
            try:  # only rows that are emitted need every field
                row = {"ts": ts, "sid": sid, "x": x, "y": y, "z": ev["z"], "v": ev["v"], "a": ev["a"],
                       "vx": ev["vx"], "vy": ev["vy"], "vz": ev["vz"],
                       "ax": ev["ax"], "ay": ev["ay"], "az": ev["az"]}
                check = finite_sum(row)
            except (KeyError, TypeError):
                check = 1
            if check != 0:
                self.bad += 1
                continue
            if active is None:
                active = sid
                self.switches += 1
            elif not inside:
                active = None  # this is the exit row; it is emitted below
                self.exits += 1
            out.append(row)
        self.active = active
        if out:
            self.emitted += len(out)
            self.output.extend(out)

    def counters(self) -> dict[str, Any]:
        return {
            **super().counters(),
            "active": self.active,
            "emitted": self.emitted,
            "activations": self.switches,
            "exits": self.exits,
            "bad_rows": self.bad,
            "other_sensor_rows": self.other_sid,
            "off_half_rows": self.off_half,
            "outside_game_rows": self.outside_game,
        }


def _next(at: np.ndarray, i: int, n: int) -> int:
    """The first index in the sorted ``at`` that is >= ``i``, or ``n`` when there is none."""
    k = int(np.searchsorted(at, i))
    return int(at[k]) if k < len(at) else n
