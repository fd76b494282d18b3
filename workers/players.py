"""Player average: one position/speed stream per player from the player's sensors.

A player wears two leg sensors (goalkeepers two more on the hands, the referee
two: 105, 106). Q1 and Q3 need one sample per player, so this component keeps
the latest row of each sensor and, on every 20 ms event-time boundary that a
player's data crosses, emits the mean of those latest rows.

Exact rule (docs/q1-q3.md): 20 ms slots are ``[k·20ms, (k+1)·20ms)`` of ``ts``.
When an accepted row of player P falls in a later slot than P's previous
accepted row (slot c), P's tuple for the boundary ``B = (c+1)·20ms`` is emitted
first: ``ts = B`` and the mean of each sensor's latest row with ``ts`` in
``[B - 1 s, B)`` (a sensor silent for a second no longer counts). Rows sit in
slots ``<= c``, so the tuple depends only on input with ``ts < B``.

The same tuple also goes out as soon as every input below ``B`` is processed
(the unit's release point reaches ``B``): its content is final then, and P's
next row, which would have emitted it, may be seconds away (a player whose
sensors lost their connection) or never come (the end of the data, where the
release point jumps to the end and closes every player's last slot). Emitting
it then keeps the output watermark exact (nothing owed below the release
point), so the tuple is never late downstream, and the output is the same
tuples however the inputs' rows, promises and ends interleave.

Units stay raw, as means of the DEBS fields: x, y, z in mm, v in µm/s, a in
µm/s² (floats: ``sum_of_ints / n``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np

from pan.buffers.tuples import Tuple
from pan.components.base import ComponentContext
from pan.components.catalog import register
from pan.components.ordered import OrderedComponent
from pan.config.specs import WorkerSpec
from workers.arrays import ArrayPath, arrays_param
from workers.debs import PLAYER_SENSORS, PLAYERS, PS_PER_MS, PS_PER_S, REFEREE, REFEREE_SENSORS, sensor_stream
from workers.gametime import MAX_GAP_PS


class _Sampled(Protocol):
    last_ts: int | None


P = TypeVar("P", bound=_Sampled)

SLOT_PS = 20 * PS_PER_MS
STALE_PS = PS_PER_S
FIELDS = ("x", "y", "z", "v", "a")

#: Every entity the component can average, with its sensors.
ENTITY_SENSORS: dict[str, tuple[int, ...]] = {**PLAYER_SENSORS, REFEREE: REFEREE_SENSORS}
ENTITIES = (*PLAYERS, REFEREE)


def _is_num(v: Any) -> bool:
    t = type(v)
    return t is int or (t is float and math.isfinite(v))


def selected_players(
    spec: WorkerSpec, allowed: tuple[str, ...], default: tuple[str, ...]
) -> tuple[list[str], list[str]]:
    """The ``players`` param as a list (default ``default``) and problems with it."""
    value = spec.params.get("players")
    if value is None:
        return list(default), []
    if not isinstance(value, list) or not value or not all(isinstance(p, str) for p in value):
        return [], [f"players: must be a non-empty list of names from {', '.join(allowed)}, got {value!r}"]
    problems = [f"players: unknown player {p!r} (allowed: {', '.join(allowed)})" for p in value if p not in allowed]
    if len(set(value)) != len(value):
        problems.append(f"players: duplicates in {value!r}")
    return [p for p in dict.fromkeys(value) if p in allowed], problems


def selected_subset(
    spec: WorkerSpec, key: str, allowed: tuple[str, ...], noun: str = ""
) -> tuple[list[str], list[str]]:
    """The ``key`` param (a list of names from ``allowed``; default all of them) in ``allowed``'s order,
    and problems with it; ``noun`` names a member in the messages."""
    value = spec.params.get(key)
    if value is None:
        return list(allowed), []
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        return [], [f"{key}: must be a non-empty list from {', '.join(allowed)}, got {value!r}"]
    unknown = f"{key}: unknown {noun} " if noun else f"{key}: unknown "
    bad = [f"{unknown}{v!r} (allowed: {', '.join(allowed)})" for v in value if v not in allowed]
    return [v for v in allowed if v in value], bad


def check_inputs_match(spec: WorkerSpec, derived: list[str]) -> list[str]:
    """Inputs come from ``players``; an explicit ``inputs`` list must name the same streams."""
    if spec.inputs and sorted(spec.inputs) != sorted(derived):
        return [f"players: inputs {spec.inputs!r} differ from the streams of the players {derived!r}; omit inputs"]
    return []


@register
class PlayerAverage(ArrayPath, OrderedComponent):
    """SENSOR<sid> rows -> one ``A1``…``B8``/``REFEREE`` tuple per player per 20 ms slot."""

    ROW_FIELDS = ("sid", "ts", *FIELDS)
    COLUMN_INPUTS = True
    ARRAYS_DEFAULT = False
    MIN_ARRAY_ROWS = 1024  # tables of row ids: the array path from here on (`pan bench arrays`)

    type_name = "player_average"
    state_attributes = ("_latest", "_slot", "_done", "rows", "bad", "foreign", "stale", "emitted", "rows_on_arrays")
    own_params = ("players", "arrays")

    @classmethod
    def players(cls, spec: WorkerSpec) -> list[str]:
        return selected_players(spec, ENTITIES, ENTITIES)[0]

    @classmethod
    def input_names(cls, spec: WorkerSpec) -> list[str]:
        return [sensor_stream(sid) for p in cls.players(spec) for sid in ENTITY_SENSORS[p]]

    @classmethod
    def main_outputs(cls, spec: WorkerSpec) -> list[str]:
        return cls.players(spec)

    @classmethod
    def check_own_params(cls, spec: WorkerSpec) -> list[str]:
        problems = selected_players(spec, ENTITIES, ENTITIES)[1] + arrays_param(spec)[1]
        return problems + check_inputs_match(spec, cls.input_names(spec))

    def __init__(self, ctx: ComponentContext) -> None:
        super().__init__(ctx)
        self._owner: dict[int, str] = {}
        self._latest: dict[int, list[Any] | None] = {}
        self._sids: dict[str, tuple[int, ...]] = {}
        self._slot: dict[str, int | None] = {}
        self._done: dict[str, int] = {}  # per player: the boundary of the last tuple emitted
        self._out = {p: ctx.outputs[p] for p in self.players(ctx.spec)}
        for p in self._out:
            self._sids[p] = ENTITY_SENSORS[p]
            self._slot[p] = None
            self._done[p] = -1
            for sid in ENTITY_SENSORS[p]:
                self._owner[sid] = p
                self._latest[sid] = None
        self.rows = 0
        self.bad = 0
        self.foreign = 0
        self.stale = 0
        self.emitted = 0
        self.arrays = arrays_param(ctx.spec, default=self.ARRAYS_DEFAULT)[0]
        self.rows_on_arrays = 0  # rows the array path took (a batch with a row not all ints goes event by event)

    def _process_events(self, events: list[Tuple]) -> None:
        """The per-event path (and the array path's for a batch with a row that is not all ints)."""
        owner, latest, slots = self._owner, self._latest, self._slot
        for ev in events:
            self.rows += 1
            try:
                sid, ts = ev["sid"], ev["ts"]
                x, y, z, v, a = ev["x"], ev["y"], ev["z"], ev["v"], ev["a"]
            except (KeyError, TypeError):
                self.bad += 1
                continue
            row = [ts, x, y, z, v, a]
            if not (
                type(x) is int and type(y) is int and type(z) is int and type(v) is int and type(a) is int
                and type(ts) is int and v >= 0 and a >= 0
            ) and not self._valid(row):
                self.bad += 1
                continue
            player = owner.get(sid) if type(sid) is int else None
            if player is None:
                self.foreign += 1
                continue
            prev = latest[sid]
            if prev is not None and ts < prev[0]:
                self.stale += 1  # behind this sensor's newer row: only late events get here
                continue
            slot = ts // SLOT_PS
            cur = slots[player]
            if cur is None or slot > cur:
                if cur is not None and (cur + 1) * SLOT_PS > self._done[player]:
                    self._emit(player, (cur + 1) * SLOT_PS)
                slots[player] = slot
            latest[sid] = row

    def _suits(self, table: np.ndarray) -> bool:
        """Sums over a player's rows stay exact in int64."""
        return not ((table > 2**59) | (table < -(2**59))).any()

    def _process_table(self, table: np.ndarray) -> None:
        """The array path: the same rows, counters and tuples as ``_process_events``, per sensor and player."""
        self.rows += len(table)
        sid, ts = table[:, 0], table[:, 1]
        bad = (table[:, 5] < 0) | (table[:, 6] < 0)
        self.bad += int(bad.sum())
        ok = ~bad
        known = ok & np.isin(sid, np.fromiter(self._owner, dtype=np.int64, count=len(self._owner)))
        self.foreign += int(ok.sum() - known.sum())
        accepted = np.zeros(len(table), dtype=bool)
        for s in np.unique(sid[known]).tolist():
            rows = np.flatnonzero(known & (sid == s))
            prev = self._latest[s]
            highest = np.maximum.accumulate(np.concatenate(([-1 if prev is None else prev[0]], ts[rows[:-1]])))
            fresh = ts[rows] >= highest  # behind this sensor's newer row: only late events
            self.stale += int(len(rows) - fresh.sum())
            accepted[rows[fresh]] = True
        for player in {self._owner[s] for s in np.unique(sid[accepted]).tolist()}:
            sids = self._sids[player]
            mine = np.flatnonzero(accepted & np.isin(sid, np.array(sids)))
            self._player_rows(player, table[mine])

    def _player_rows(self, player: str, rows: np.ndarray) -> None:
        """One player's accepted rows, in order: emit each slot the rows close, then keep the latest rows."""
        slot = rows[:, 1] // SLOT_PS
        cur = self._slot[player]
        before = np.maximum.accumulate(np.concatenate(([-1 if cur is None else cur], slot[:-1])))
        closes = np.flatnonzero(slot > before)
        if cur is None and len(closes) and closes[0] == 0:
            closes = closes[1:]  # the player's first row opens a slot and closes none
        boundaries = (before[closes] + 1) * SLOT_PS
        fresh = boundaries > self._done[player]  # not yet emitted when the release point passed it
        closes, boundaries = closes[fresh], boundaries[fresh]
        sids = self._sids[player]
        of_sid = [np.flatnonzero(rows[:, 0] == s) for s in sids]
        if len(closes):
            self._done[player] = int(boundaries[-1])
            oldest = boundaries - STALE_PS
            n = np.zeros(len(closes), dtype=np.int64)
            sums = np.zeros((len(closes), 5), dtype=np.int64)
            for s, at in zip(sids, of_sid, strict=True):
                k = np.searchsorted(at, closes) - 1  # the sensor's latest row before each closing row
                held = self._latest[s]
                latest = rows[at[np.maximum(k, 0)]] if len(at) else np.zeros((len(closes), 7), dtype=np.int64)
                if held is not None:
                    latest[k < 0] = np.array([s, *held], dtype=np.int64)
                known = (k >= 0) | (held is not None)
                counts = known & (latest[:, 1] >= oldest)
                n += counts
                sums += np.where(counts[:, None], latest[:, 2:], 0)
            for boundary, count, (sx, sy, sz, sv, sa) in zip(boundaries.tolist(), n.tolist(), sums.tolist(),
                                                             strict=True):
                if count:
                    self._emit_mean(player, boundary, (sx, sy, sz, sv, sa), count)
        self._slot[player] = int(slot.max()) if cur is None else max(cur, int(slot.max()))
        for s, at in zip(sids, of_sid, strict=True):
            if len(at):
                self._latest[s] = rows[at[-1], 1:].tolist()

    def _emit_mean(self, player: str, boundary: int, sums: tuple[int, ...], n: int) -> None:
        sx, sy, sz, sv, sa = sums
        self.emitted += 1
        self._out[player].append(
            {"ts": boundary, "player": player, "x": sx / n, "y": sy / n, "z": sz / n, "v": sv / n, "a": sa / n}
        )

    @staticmethod
    def _valid(row: list[Any]) -> bool:
        return type(row[0]) is int and all(_is_num(f) for f in row[1:]) and row[4] >= 0 and row[5] >= 0

    def on_release_point(self, limit: int) -> None:
        """Close the slots the release point has passed before the outputs' watermarks go out."""
        self._close_slots(limit)

    def _close_slots(self, limit: int) -> None:
        """Emit every open slot whose end ``B`` has ``ts < B`` all released (``B <= limit + 1``).

        Whether a player's sensors have ended does not matter: when the last
        slot goes out depends only on the release point, never on when an end
        arrived compared with the other inputs' rows and promises.
        """
        for player, cur in self._slot.items():
            if cur is None:
                continue
            boundary = (cur + 1) * SLOT_PS
            if boundary <= limit + 1 and boundary > self._done[player]:
                self._emit(player, boundary)

    def _emit(self, player: str, boundary: int) -> None:
        self._done[player] = boundary
        oldest = boundary - STALE_PS
        n = sx = sy = sz = sv = sa = 0
        for sid in self._sids[player]:
            r = self._latest[sid]
            if r is None or r[0] < oldest:
                continue
            n += 1
            sx += r[1]
            sy += r[2]
            sz += r[3]
            sv += r[4]
            sa += r[5]
        if not n:
            return
        self.emitted += 1
        self._out[player].append(
            {"ts": boundary, "player": player, "x": sx / n, "y": sy / n, "z": sz / n, "v": sv / n, "a": sa / n}
        )

    def watermark(self, output: str, limit: int) -> int:
        """Exact: every slot ending at or below ``limit + 1`` has been emitted (``_close_slots``).

        A player's next tuple therefore has ``ts`` above ``limit``: the end of
        a slot still open, or of a slot of a row not yet released.
        """
        if output not in self._slot:  # e.g. the late-events stream
            return super().watermark(output, limit)
        return limit

    def raw_watermark(self, output: str, emitted: int) -> int | None:
        """Behind a speculative unit: a player's next tuple closes the slot its newest processed row opened,
        or a later one, whether that row was settled or premature; so its raw view owes nothing below that
        slot's end. A late row that changes an emitted tuple makes the unit replay, which withdraws it.

        This lets a speculative reader (the ball-hit detector) speculate on averages as far as they did, not
        only as far as their input settled (``on_release_point`` closes slots only at settled limits).
        """
        slot = self._slot.get(output)
        if slot is None:  # no row yet, or not a player's stream (the late-events stream)
            return None
        return min((slot + 1) * SLOT_PS - 1, emitted)

    def counters(self) -> dict[str, Any]:
        return {
            **super().counters(),
            "rows": self.rows, "bad": self.bad, "foreign": self.foreign, "stale": self.stale, "emitted": self.emitted,
        }


class PlayerStreamsComponent(OrderedComponent):
    """Base of the components fed by ``player_average`` streams: ``params.players`` picks them."""

    #: Who may be selected; A1..B8 by default, the referee too.
    ALLOWED: tuple[str, ...] = (*PLAYERS, REFEREE)
    #: Counters of ``usable_samples``: part of a subclass's ``state_attributes``.
    COUNTERS: ClassVar[tuple[str, ...]] = ("samples", "bad", "foreign", "out_of_order", "gaps")

    @classmethod
    def players(cls, spec: WorkerSpec) -> list[str]:
        return selected_players(spec, cls.ALLOWED, PLAYERS)[0]

    @classmethod
    def input_names(cls, spec: WorkerSpec) -> list[str]:
        return cls.players(spec)

    def __init__(self, ctx: ComponentContext) -> None:
        super().__init__(ctx)
        self.samples = self.bad = self.foreign = self.out_of_order = self.gaps = 0

    def usable_samples(
        self, events: list[Tuple], state: Mapping[str, P]
    ) -> Iterator[tuple[P, int, float, float, int | None]]:
        """(player state, ts, x, y, since) of each well-formed sample of a known player that is newer than
        the player's last one (``state[name].last_ts``); the others are counted, never raised.

        ``since`` is the previous sample's ts when the step from it counts: None for the player's first
        sample and after a gap longer than ``MAX_GAP_PS`` (counted in ``gaps``). The caller moves
        ``last_ts`` on.
        """
        for ev in events:
            self.samples += 1
            name = ev.get("player")
            st = state.get(name) if type(name) is str else None
            if st is None:
                self.foreign += 1
                continue
            ts, x, y = ev.get("ts"), ev.get("x"), ev.get("y")
            if (
                type(ts) is not int or type(x) not in (int, float) or type(y) not in (int, float)
                or not (math.isfinite(x) and math.isfinite(y))
            ):
                self.bad += 1
                continue
            since = st.last_ts
            if since is not None:
                if ts <= since:
                    self.out_of_order += 1
                    continue
                if ts - since > MAX_GAP_PS:
                    self.gaps += 1
                    since = None
            yield st, ts, x, y, since

    def counters(self) -> dict[str, Any]:
        return {**super().counters(), "samples": self.samples, "bad": self.bad, "foreign": self.foreign,
                "out_of_order": self.out_of_order, "gaps": self.gaps}

