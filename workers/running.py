"""Q1 running analysis: per player, time and distance per intensity band.

Input: the ``player_average`` streams (one sample per player per 20 ms).
Exact rules (docs/q1-q3.md):
- Distance is the path length of the player's averaged position, not sensor
  |v| x time: a goalkeeper's swinging hands move the hand sensors, not the
  player. The time between consecutive samples of a player, ``[t_k, t_k+1)``,
  runs at the speed of the straight step between them: ``v = sqrt(dx² + dy²)
  * 1e15 / (t_k+1 - t_k)`` µm/s from their x, y (mm; on the ground, so a
  sensor's height does not count), and that speed gives its band. Only its
  game time counts (``workers.gametime``); gaps longer than 1 s count nothing.
- That time is cut into pieces at game seconds; a piece of ``d`` ps covers
  ``floor(v * d / 1e9)`` nm. Integer ps and nm are summed, so sums never drift
  and old buckets leave a window exactly.
- ``RUN_<p>`` describes the current segment (contiguous counted time in one
  band): emitted at the end ``T`` of every counted interval (at most once per
  20 ms slot, ``ceil(T / 20 ms)``), with ``distance = nm / 1e9`` m and
  ``speed = distance * 3.6e12 / (ts_stop - ts_start)`` km/h.
- ``RUNAGG_<w>_<p>`` at the same instants (or every ``agg_period_ms``): with ``g``
  the game clock at ``T``, a window of ``W`` s holds the game seconds
  ``n >= ceil(g / 1 s) - W``: the current partial second and ``W - 1`` whole ones.

Two paths give the same bytes (``arrays`` param, default true): each player's
samples of a batch at once on numpy arrays (``workers.running_arrays``), or
sample by sample (``arrays: false``, the reference the tests compare with).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from pan.buffers.streams import OutputStream
from pan.buffers.tuples import Tuple
from pan.components.base import ComponentContext
from pan.components.catalog import register
from pan.config.specs import WorkerSpec
from workers.arrays import arrays_param
from workers.debs import PLAYERS, PS_PER_MS, PS_PER_S, WINDOWS
from workers.gametime import clipped, seconds_of
from workers.players import PlayerStreamsComponent, check_inputs_match, selected_players, selected_subset
from workers.running_arrays import Steps, new_totals, seconds_needed, window_sums
from workers.windows import Windows

BANDS = ("standing", "trot", "low", "medium", "high", "sprint")
#: Upper speed limits (km/h, inclusive) of all bands but the last.
LIMITS = (1.0, 11.0, 14.0, 17.0, 24.0)
SLOT_PS = 20 * PS_PER_MS
#: Window keys: band ``i`` sums its time (ps) under ``i`` and its distance (nm) under ``DISTANCE + i``.
DISTANCE = len(BANDS)


def band_of(v_um_s: float) -> int:
    """Index into BANDS for a speed in µm/s (km/h = v * 3.6e-6)."""
    kmh = v_um_s * 3.6e-6
    for i, limit in enumerate(LIMITS):
        if kmh <= limit:
            return i
    return len(LIMITS)


def selected_windows(spec: WorkerSpec) -> tuple[list[str], list[str]]:
    """The ``windows`` param (default all of ``debs.WINDOWS``) and problems with it."""
    return selected_subset(spec, "windows", tuple(WINDOWS), "window")


class _Player:
    __slots__ = (
        "agg_slot",
        "aggregates",
        "band",
        "last_ts",
        "name",
        "prefix",
        "run",
        "run_slot",
        "second",
        "seg_band",
        "seg_nm",
        "seg_start",
        "seg_stop",
        "totals",
        "v",
        "windows",
        "x",
        "y",
    )

    def __init__(self, name: str, run: OutputStream, windows: Windows[int], aggregates: list[OutputStream]) -> None:
        self.name = name
        self.run = run
        self.windows = windows
        self.aggregates = aggregates  # RUNAGG stream of each window
        self.last_ts: int | None = None
        self.x = self.y = 0.0  # position of the latest sample (mm)
        self.v = 0.0  # speed of the step being accounted (µm/s)
        self.band = 0
        self.second = -1  # the game second of the open bucket
        self.seg_band = -1
        self.seg_start = self.seg_stop = self.seg_nm = 0
        self.run_slot = self.agg_slot = -1
        # the array path's windows: ps and nm per game second and key, and their sum so far
        self.totals: np.ndarray | None = None
        self.prefix: np.ndarray | None = None


@register
class Running(PlayerStreamsComponent):
    """Player samples -> ``RUN_<p>`` (current segment) and ``RUNAGG_<w>_<p>`` (windows)."""

    type_name = "running"
    state_attributes = (*PlayerStreamsComponent.COUNTERS, "_state")
    own_params = ("players", "windows", "agg_period_ms", "arrays")

    @classmethod
    def main_outputs(cls, spec: WorkerSpec) -> list[str]:
        windows = selected_windows(spec)[0]
        return [s for p in cls.players(spec) for s in (f"RUN_{p}", *(f"RUNAGG_{w}_{p}" for w in windows))]

    @classmethod
    def check_own_params(cls, spec: WorkerSpec) -> list[str]:
        problems = selected_players(spec, cls.ALLOWED, PLAYERS)[1] + selected_windows(spec)[1]
        period = spec.params.get("agg_period_ms", 20)
        if type(period) is not int or period < 20 or period % 20:
            problems.append(f"agg_period_ms: must be a positive multiple of 20, got {period!r}")
        problems += arrays_param(spec)[1]
        return problems + check_inputs_match(spec, cls.input_names(spec))

    def __init__(self, ctx: ComponentContext) -> None:
        super().__init__(ctx)
        windows = selected_windows(ctx.spec)[0]
        self._agg_ps = self.params.get("agg_period_ms", 20) * PS_PER_MS
        self.arrays = arrays_param(ctx.spec)[0]
        lengths = [WINDOWS[w] for w in windows]
        self._lengths_s = [None if n is None else n // PS_PER_S for n in lengths]
        assert all(n is None or n % PS_PER_S == 0 for n in lengths), "windows are whole seconds"
        self._state: dict[str, _Player] = {}
        for p in self.players(ctx.spec):
            aggregates = [ctx.outputs[f"RUNAGG_{w}_{p}"] for w in windows]
            self._state[p] = _Player(p, ctx.outputs[f"RUN_{p}"], Windows(lengths), aggregates)
            if self.arrays:
                self._state[p].totals = new_totals()
                self._state[p].prefix = np.zeros(new_totals().shape[1], dtype=np.int64)

    def process(self, events: list[Tuple]) -> None:
        if self.arrays:
            self._process_arrays(events)
            return
        for st, ts, x, y, since in self.usable_samples(events, self._state):
            x, y = float(x), float(y)
            if since is not None:
                dx, dy = x - st.x, y - st.y
                st.v = math.sqrt(dx * dx + dy * dy) * 1e15 / (ts - since)
                st.band = band_of(st.v)
                for lo, hi, offset in clipped(since, ts):
                    self._account(st, lo, hi, offset)
            st.last_ts, st.x, st.y = ts, x, y

    def _account(self, st: _Player, lo: int, hi: int, offset: int) -> None:
        """Add the counted interval ``[lo, hi)`` (ts; ``g = ts - offset``) and emit."""
        band, v, windows = st.band, st.v, st.windows
        total = 0
        g_end = hi - offset
        for g, cut in seconds_of(lo - offset, g_end):
            n = g // PS_PER_S
            if n != st.second:
                st.second = n
                windows.open(n * PS_PER_S, (n + 1) * PS_PER_S)
            nm = math.floor(v * (cut - g) / 1e9)
            total += nm
            windows.add(band, cut - g)
            windows.add(DISTANCE + band, nm)
        if st.seg_band == band and st.seg_stop == lo:
            st.seg_nm += total
        else:
            st.seg_band, st.seg_start, st.seg_nm = band, lo, total
        st.seg_stop = hi
        slot = -(-hi // SLOT_PS)
        if slot > st.run_slot:
            st.run_slot = slot
            distance = st.seg_nm / 1e9
            st.run.append({
                "ts": hi, "ts_start": st.seg_start, "ts_stop": hi, "player": st.name, "intensity": BANDS[band],
                "distance": distance, "speed": distance * 3.6e12 / (hi - st.seg_start),
            })
        slot = -(-hi // self._agg_ps)
        if slot > st.agg_slot:
            st.agg_slot = slot
            windows.slide(-(-g_end // PS_PER_S) * PS_PER_S)  # the current partial second and whole ones
            for w, stream in zip(windows, st.aggregates, strict=True):
                get = w.sums.get
                stream.append({
                    "ts": hi, "player": st.name,
                    "standing_time_ps": get(0, 0), "standing_distance": get(DISTANCE, 0) / 1e9,
                    "trot_time_ps": get(1, 0), "trot_distance": get(DISTANCE + 1, 0) / 1e9,
                    "low_time_ps": get(2, 0), "low_distance": get(DISTANCE + 2, 0) / 1e9,
                    "medium_time_ps": get(3, 0), "medium_distance": get(DISTANCE + 3, 0) / 1e9,
                    "high_time_ps": get(4, 0), "high_distance": get(DISTANCE + 4, 0) / 1e9,
                    "sprint_time_ps": get(5, 0), "sprint_distance": get(DISTANCE + 5, 0) / 1e9,
                })

    def _process_arrays(self, events: list[Tuple]) -> None:
        """The array path: each player's accepted samples of the batch at once (``workers.running_arrays``)."""
        batches: dict[_Player, list[tuple[int, float, float, int]]] = {}
        for st, ts, x, y, since in self.usable_samples(events, self._state):
            batches.setdefault(st, []).append((ts, float(x), float(y), -1 if since is None else since))
            st.last_ts = ts
        for st, rows in batches.items():
            ts, x, y, since = zip(*rows, strict=True)
            steps = Steps(np.array(ts, dtype=np.int64), np.array(x), np.array(y), np.array(since, dtype=np.int64),
                          st.x, st.y)
            st.x, st.y = x[-1], y[-1]
            if len(steps.hi):
                self._emit_steps(st, steps)

    def _emit_steps(self, st: _Player, steps: Steps) -> None:
        """Count ``steps`` into the player's windows and segment, and emit RUN and RUNAGG tuples."""
        assert st.totals is not None and st.prefix is not None
        band, lo, hi = steps.band, steps.lo, steps.hi
        steps.add_to_seconds(st.totals)
        prefix = st.prefix + np.cumsum(steps.contrib, axis=0)
        st.prefix = prefix[-1]
        # segments: a step continues the one before when its band and start match that one's band and end
        prev_band = np.concatenate(([st.seg_band], band[:-1]))
        prev_hi = np.concatenate(([st.seg_stop], hi[:-1]))
        starts = (band != prev_band) | (lo != prev_hi)
        at = np.maximum.accumulate(np.where(starts, np.arange(len(hi)), -1))
        nm_sum = np.cumsum(steps.nm)
        earlier = np.where(at > 0, nm_sum[np.maximum(at, 1) - 1], 0)  # nm of the batch's steps before the start
        seg_nm = np.where(at < 0, st.seg_nm + nm_sum, nm_sum - earlier)
        seg_start = np.where(at < 0, st.seg_start, lo[np.maximum(at, 0)])
        st.seg_band, st.seg_start, st.seg_nm = int(band[-1]), int(seg_start[-1]), int(seg_nm[-1])
        st.seg_stop = int(hi[-1])
        run = _new_slots(-(-hi // SLOT_PS), st.run_slot)
        st.run_slot = max(st.run_slot, int(-(-hi[-1] // SLOT_PS)))
        if run.any():
            distance = seg_nm[run] / 1e9
            speed = distance * 3.6e12 / (hi[run] - seg_start[run])
            st.run.extend([
                {"ts": h, "ts_start": s, "ts_stop": h, "player": st.name, "intensity": BANDS[b], "distance": d,
                 "speed": v}
                for h, s, b, d, v in zip(hi[run].tolist(), seg_start[run].tolist(), band[run].tolist(),
                                         distance.tolist(), speed.tolist(), strict=True)
            ])
        agg = _new_slots(-(-hi // self._agg_ps), st.agg_slot)
        st.agg_slot = max(st.agg_slot, int(-(-hi[-1] // self._agg_ps)))
        if not agg.any():
            return
        g_end = steps.g_end[agg]
        need = seconds_needed(g_end, [n for n in self._lengths_s if n is not None])
        before = np.cumsum(st.totals[:need], axis=0)
        ts_list = hi[agg].tolist()
        for length_s, stream in zip(self._lengths_s, st.aggregates, strict=True):
            sums = window_sums(prefix[agg], before, g_end, length_s)
            stream.extend([_aggregate(t, st.name, row) for t, row in zip(ts_list, sums.tolist(), strict=True)])


def _new_slots(slots: np.ndarray, done: int) -> np.ndarray:
    """Where a step's slot is later than every slot before it (``done``: the latest emitted before the batch)."""
    before = np.maximum.accumulate(np.concatenate(([done], slots[:-1])))
    return slots > before


def _aggregate(ts: int, player: str, sums: list[int]) -> dict[str, Any]:
    """A RUNAGG tuple from a window's sums (time per band, then distance per band), as the per-event path writes."""
    d = DISTANCE
    return {
        "ts": ts, "player": player,
        "standing_time_ps": sums[0], "standing_distance": sums[d] / 1e9,
        "trot_time_ps": sums[1], "trot_distance": sums[d + 1] / 1e9,
        "low_time_ps": sums[2], "low_distance": sums[d + 2] / 1e9,
        "medium_time_ps": sums[3], "medium_distance": sums[d + 3] / 1e9,
        "high_time_ps": sums[4], "high_distance": sums[d + 4] / 1e9,
        "sprint_time_ps": sums[5], "sprint_distance": sums[d + 5] / 1e9,
    }
