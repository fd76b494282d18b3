"""Ordering units: adaptive K-slack in front of every component (docs/ordering.md).

A unit merges a component's input streams into one stream sorted by ``ts``.
It holds every event until ``ts + K <= clk``, where ``clk`` is moved only by
designated clock streams and K is learnt from the delays the unit observes.
Everything here is pure computation: no wall time at all. A quiet input is
covered by its producer's promises (the forwarder declares idle inputs at the
edge), and the end of an input is a promise of ``END_OF_STREAM``.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from heapq import heappop, heappush
from operator import mul
from pathlib import Path
from typing import Any

import numpy as np

from pan.wire.progress import END_OF_STREAM, StreamProgress

PS_PER_MS = 10**9
PS_PER_S = 10**12

#: Upper bounds (ps) of the delay histogram buckets; a final +Inf bucket is implied.
DELAY_BUCKETS_PS: tuple[int, ...] = (
    0,
    PS_PER_MS // 1000,
    PS_PER_MS // 100,
    PS_PER_MS // 10,
    *(ms * PS_PER_MS for ms in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)),
)

LATE_POLICIES = ("deliver", "side")
CLOCK_MODES = ("max", "watermark")

#: Workflow ``params`` keys understood by ``OrderingSettings.from_params``.
PARAM_KEYS = (
    "clock", "lambda", "initial_k", "max_k", "late_policy", "window", "fallback", "notices",
    "clock_mode", "min_k",
)
#: Keys that existed once and are refused with an explanation (``validate_ordering_params``).
REMOVED_KEYS = {
    "idle_timeout": "removed: ordering units no longer decide on wall time; the forwarder declares a quiet "
    "input idle (its idle_after_ms param) and promises for it, and the end of a stream is an explicit "
    "end promise (docs/ordering.md); delete the key",
}

_NO_KEY = (-math.inf, -1)


@dataclass(slots=True)
class Released:
    """What one call hands on: ``events`` go to the component, ``late`` are the late ones.

    With ``late_policy="deliver"`` late events appear in both lists (in ``events``
    at the point they were released); with ``"side"`` only in ``late``, so the
    caller can route them to ``<output>_late``. Both are int64 arrays instead of
    lists when every released event was pushed as one (``push_rows``).
    """

    events: list[Any] | np.ndarray = field(default_factory=list)
    late: list[Any] | np.ndarray = field(default_factory=list)

    def extend(self, other: Released) -> None:
        self.events = _joined(self.events, other.events)
        self.late = _joined(self.late, other.late)


# --------------------------------------------------------------------------- settings


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (isinstance(v, int | float) and not isinstance(v, bool)) and math.isfinite(v)


@dataclass(frozen=True)
class OrderingSettings:
    """Per-component settings; times in ps.

    ``clock=None`` means every input stream is a clock stream (clk = largest ts
    seen on any input), ``fallback=None`` means every input may drive clk once
    every clock stream has ended. See docs/ordering.md for why these defaults.
    """

    clock: tuple[str, ...] | None = None
    lam: float = 0.5
    initial_k: int = 0
    max_k: int = 10 * PS_PER_S
    late_policy: str = "side"
    window: int = 10_000
    fallback: tuple[str, ...] | None = None
    notices: bool = True
    clock_mode: str = "max"
    min_k: int = 0

    def validate(self, streams: Sequence[str]) -> list[str]:
        """Problems with these settings for a unit over ``streams``; empty if fine."""
        problems: list[str] = []
        known = set(streams)
        for key, names in (("clock", self.clock), ("fallback", self.fallback)):
            if names is None:
                continue
            if not names:
                problems.append(f"{key}: must name at least one input stream")
            for n in names:
                if not isinstance(n, str) or n not in known:
                    problems.append(f"{key}: {n!r} is not an input stream")
        if not _is_number(self.lam) or self.lam < 0:
            problems.append(f"lambda: must be a finite number >= 0, got {self.lam!r}")
        for key in ("initial_k", "max_k"):
            v = getattr(self, key)
            if not _is_int(v) or v < 0:
                problems.append(f"{key}: must be an integer >= 0 (ps), got {v!r}")
        if not _is_int(self.min_k) or self.min_k < 0:
            problems.append(f"min_k: must be an integer >= 0 (ps), got {self.min_k!r}")
        elif _is_int(self.max_k) and self.min_k > self.max_k:
            problems.append(f"min_k: {self.min_k} exceeds max_k {self.max_k}")
        if self.clock_mode not in CLOCK_MODES:
            problems.append(f"clock_mode: must be one of {', '.join(CLOCK_MODES)}, got {self.clock_mode!r}")
        elif self.clock_mode == "watermark" and self.clock is not None:
            problems.append("clock: not used with clock_mode watermark (every input counts)")
        if _is_int(self.initial_k) and _is_int(self.max_k) and self.initial_k > self.max_k:
            problems.append(f"initial_k: {self.initial_k} exceeds max_k {self.max_k}")
        if self.late_policy not in LATE_POLICIES:
            problems.append(f"late_policy: must be one of {', '.join(LATE_POLICIES)}, got {self.late_policy!r}")
        if not _is_int(self.window) or self.window < 2:
            problems.append(f"window: must be an integer >= 2 (measurements), got {self.window!r}")
        if not isinstance(self.notices, bool):
            problems.append(f"notices: must be true or false, got {self.notices!r}")
        return problems

    @classmethod
    def from_params(cls, params: Mapping[str, Any] | None, streams: Sequence[str]) -> OrderingSettings:
        """Build from workflow ``params`` (keys in ``PARAM_KEYS``); ValueError lists every problem."""
        problems = validate_ordering_params(params, streams)
        if problems:
            raise ValueError("; ".join(problems))
        return cls._from_params_unchecked(params or {})

    @classmethod
    def _from_params_unchecked(cls, params: Mapping[str, Any]) -> OrderingSettings:
        kw: dict[str, Any] = {}
        for key in PARAM_KEYS:
            if key not in params:
                continue
            v = params[key]
            if key in ("clock", "fallback"):
                v = tuple(v) if isinstance(v, list | tuple) else v
            kw["lam" if key == "lambda" else key] = v
        return cls(**kw)

    def to_params(self) -> dict[str, Any]:
        """Inverse of ``from_params`` (for /streams and debugging)."""
        out: dict[str, Any] = {}
        for key in PARAM_KEYS:
            v = getattr(self, "lam" if key == "lambda" else key)
            out[key] = list(v) if isinstance(v, tuple) else v
        return out

    @classmethod
    def from_profile(
        cls,
        profile: Mapping[str, Any],
        streams: Sequence[str],
        base: OrderingSettings | None = None,
        stat: str = "max",
    ) -> OrderingSettings:
        """``base`` with ``initial_k`` taken from an offline delay profile (see ``k_from_profile``)."""
        base = base or cls()
        k = k_from_profile(profile, streams, clock=base.clock, stat=stat)
        if k is None:
            return base
        return replace(base, initial_k=min(k, base.max_k))


def validate_ordering_params(params: Mapping[str, Any] | None, streams: Sequence[str]) -> list[str]:
    """Check workflow ``params`` for an ordering unit; returns messages naming the key at fault."""
    if params is None:
        return []
    if not isinstance(params, Mapping):
        return [f"ordering params must be an object, got {type(params).__name__}"]
    problems = [f"{k}: {REMOVED_KEYS[k]}" for k in params if k in REMOVED_KEYS]
    problems += [f"unknown key {k!r}" for k in params if k not in PARAM_KEYS and k not in REMOVED_KEYS]
    for key in ("clock", "fallback"):
        v = params.get(key)
        if v is not None and not (isinstance(v, list | tuple) and all(isinstance(s, str) for s in v)):
            problems.append(f"{key}: must be a list of stream names, got {v!r}")
    if problems:
        return problems
    try:
        settings = OrderingSettings._from_params_unchecked(params)
    except TypeError as exc:  # pragma: no cover - keys are filtered above
        return [str(exc)]
    return settings.validate(streams)


_STAT_KEYS = {"max": "max_ps", "p99": "p99_ps", "p50": "p50_ps"}


def k_from_profile(
    profile: Mapping[str, Any],
    streams: Sequence[str],
    clock: Sequence[str] | None = None,
    stat: str = "max",
) -> int | None:
    """Initial K from per-stream delay statistics, or None if the profile knows none of ``streams``.

    Delays in the profile are absolute (arrival minus ts). The unit measures them
    relative to its clock streams, so K = largest ``stat`` over the inputs minus
    the smallest typical delay of a clock stream (``min_ps`` if given, else ``p50_ps``).
    """
    if stat not in _STAT_KEYS:
        raise ValueError(f"stat must be one of {', '.join(_STAT_KEYS)}, got {stat!r}")
    per = profile.get("streams") if isinstance(profile, Mapping) else None
    if not isinstance(per, Mapping):
        raise ValueError('delay profile must be an object with a "streams" object')
    key = _STAT_KEYS[stat]
    tails: list[float] = []
    refs: list[float] = []
    for name in streams:
        entry = per.get(name)
        if entry is None:
            continue
        if not isinstance(entry, Mapping) or not _is_number(entry.get(key)):
            raise ValueError(f"delay profile: stream {name!r} lacks a numeric {key!r}")
        tails.append(float(entry[key]))
        if clock is None or name in clock:
            ref = entry.get("min_ps", entry.get("p50_ps"))
            if _is_number(ref):
                refs.append(float(ref))
    if not tails:
        return None
    return max(0, math.ceil(max(tails) - (min(refs) if refs else 0.0)))


def load_profile(path: str | Path) -> dict[str, Any]:
    """Read a delay profile JSON file as written by ``pan stats delays``."""
    with open(path, "rb") as fh:
        profile = json.load(fh)
    if not isinstance(profile, dict) or not isinstance(profile.get("streams"), dict):
        raise ValueError(f'{path}: not a delay profile (expected {{"streams": {{...}}}})')
    return profile


# --------------------------------------------------------------------------- delay window


class _DelayWindow:
    """The recent delay measurements K is computed from.

    Kept as two halves of ``window // 2`` measurements each: statistics cover the
    previous and the current half, i.e. the last ``window/2 .. window``
    measurements. An old peak is therefore forgotten after at most ``window``
    newer measurements, which is what lets K shrink. Sums are exact integers.
    """

    __slots__ = (
        "cur_max", "cur_n", "cur_smax", "cur_sq", "cur_sum", "half", "n_streams",
        "prev_max", "prev_n", "prev_smax", "prev_sq", "prev_sum", "total",
    )

    def __init__(self, window: int, n_streams: int) -> None:
        self.half = max(1, window // 2)
        self.n_streams = n_streams
        self.total = 0
        self.prev_n = self.prev_sum = self.prev_sq = self.prev_max = 0
        self.prev_smax = [0] * n_streams
        self._clear_current()

    def _clear_current(self) -> None:
        self.cur_n = self.cur_sum = self.cur_sq = self.cur_max = 0
        self.cur_smax = [0] * self.n_streams

    def add(self, ds: list[int], pos: int | None) -> None:
        """Add measurements of stream ``pos`` (None for pseudo measurements from notices)."""
        i, m = 0, len(ds)
        while i < m:
            room = self.half - self.cur_n
            chunk = ds if (i == 0 and m <= room) else ds[i : i + room]
            c = len(chunk)
            top = max(chunk)
            self.cur_n += c
            self.cur_sum += sum(chunk)
            self.cur_sq += sum(map(mul, chunk, chunk))
            if top > self.cur_max:
                self.cur_max = top
            if pos is not None and top > self.cur_smax[pos]:
                self.cur_smax[pos] = top
            self.total += c
            i += c
            if self.cur_n >= self.half:
                self.prev_n, self.prev_sum, self.prev_sq = self.cur_n, self.cur_sum, self.cur_sq
                self.prev_max, self.prev_smax = self.cur_max, self.cur_smax
                self._clear_current()

    def add_zeros(self, m: int) -> None:
        """``m`` zero delays: the common case of a clock stream arriving in order."""
        while m:
            take = min(m, self.half - self.cur_n)
            self.cur_n += take
            self.total += take
            m -= take
            if self.cur_n >= self.half:
                self.prev_n, self.prev_sum, self.prev_sq = self.cur_n, self.cur_sum, self.cur_sq
                self.prev_max, self.prev_smax = self.cur_max, self.cur_smax
                self._clear_current()

    @property
    def n(self) -> int:
        return self.prev_n + self.cur_n

    def max(self) -> int:
        return max(self.prev_max, self.cur_max)

    def stream_max(self, pos: int) -> int:
        return max(self.prev_smax[pos], self.cur_smax[pos])

    def std(self) -> float:
        n = self.n
        if n < 2:
            return 0.0
        s = self.prev_sum + self.cur_sum
        q = self.prev_sq + self.cur_sq
        return math.sqrt(max(0, n * q - s * s)) / n


def _delays(start: int, tss: list[int] | np.ndarray) -> tuple[list[int], int]:
    """The positive delays of ``tss`` against their running maximum from ``start`` on (zeros are only counted
    by the caller), in order, and that maximum after the last."""
    if isinstance(tss, np.ndarray):
        running = np.maximum.accumulate(np.concatenate((np.array([start], dtype=np.int64), tss[:-1])))
        behind = running - tss
        return behind[behind > 0].tolist(), max(int(running[-1]), int(tss[-1]))
    ds = []
    add = ds.append
    top = start
    for t in tss:
        if t > top:
            top = t
        elif t < top:
            add(top - t)
    return ds, top


def _as_list(values: list[Any] | np.ndarray) -> list[Any]:
    return values.tolist() if isinstance(values, np.ndarray) else values


def _joined(first: list[Any] | np.ndarray, then: list[Any] | np.ndarray) -> list[Any]:
    """``first`` extended by ``then`` (in place where ``first`` is a list), arrays as lists."""
    joined = _as_list(first)
    joined.extend(_as_list(then))
    return joined


# --------------------------------------------------------------------------- the unit


class OrderingUnit:
    """Adaptive K-slack over a fixed list of named input streams.

    Output order is the total order (ts, position of the stream in ``streams``,
    arrival order within the stream = index order). With no late events it is
    therefore the same however arrivals interleave.

    The buffer is one run per input stream, kept sorted by ts (stably, so equal
    ts stay in index order) as two parallel lists of ts and events. Streams are
    nearly in order, so a batch is usually just appended. A release cuts each run
    at ``clk - K`` and merges the pieces with one stable sort on ts; ties across
    streams then come out in stream-position order.

    Row ids pushed as int64 arrays (``push_rows``) stay arrays: the run is then
    a pair of arrays, cut with ``searchsorted`` and merged with one stable
    ``argsort``, and a release of arrays alone hands on an array of ids. A
    stream's run is in one form at a time: a batch of tuples turns an array
    run into lists (a caught-up reader's JSON tuples among a catch-up's rows),
    a batch of ids turns a list run back into arrays if it holds ids alone.
    """

    def __init__(self, settings: OrderingSettings, streams: Sequence[str]) -> None:
        streams = list(streams)
        problems = settings.validate(streams)
        if not streams:
            problems.append("an ordering unit needs at least one input stream")
        if len(set(streams)) != len(streams):
            problems.append(f"duplicate input streams in {streams!r}")
        if problems:
            raise ValueError("; ".join(problems))
        self.settings = settings
        self.streams: tuple[str, ...] = tuple(streams)
        self._pos = {s: i for i, s in enumerate(streams)}
        self._clock_set = set(settings.clock or streams)
        self._fallback_set = set(settings.fallback or streams)
        self._is_clock = [s in self._clock_set for s in streams]
        self._deliver = settings.late_policy == "deliver"
        self._watermark = settings.clock_mode == "watermark"
        # Release strictly below clk - K (1) or up to it (0). Watermark mode is strict: a stream at t may
        # still bring events at t. The speculative unit settles strictly in both modes (pan/ordering/speculation.py).
        self._tie = int(self._watermark)
        # Promises (below END_OF_STREAM) per stream, apart from the data seen: a promise says how far the
        # stream has progressed, never how late its events are, so it is not a delay reference.
        self._promised: list[int | None] = [None] * len(streams)
        self._ended = [False] * len(streams)
        self._n_ended = 0
        self._prog: list[int | None] = [None] * len(streams)  # max(largest ts, promise) per stream

        self._bts: list[list[int]] = [[] for _ in streams]
        self._bev: list[list[Any]] = [[] for _ in streams]
        # The run of a stream whose events came as arrays (``push_rows``); None while it is held in the lists.
        self._ats: list[np.ndarray | None] = [None] * len(streams)
        self._aev: list[np.ndarray | None] = [None] * len(streams)
        # Heap of (head ts, pos) so a release visits only streams with something due;
        # an entry is current iff it equals _head[pos], older ones are skipped.
        self._heads: list[tuple[int, int]] = []
        self._head: list[int | None] = [None] * len(streams)
        self._n_buf = 0
        self._clk: int | None = None
        self._k = min(max(settings.initial_k, settings.min_k), settings.max_k)
        self._win = _DelayWindow(settings.window, len(streams))
        # Non-clock batches waiting for their delay measurement: (stream position, ts, clk when they came).
        self._pending: list[tuple[int, list[int], int | None]] = []
        self._pending_n = 0
        self._rel_key: tuple[float, int] = _NO_KEY
        self._max_ts: list[int | None] = [None] * len(streams)
        self._up_k: dict[str, int] = {}

        self._hist = [0] * (len(DELAY_BUCKETS_PS) + 1)
        self._hist_sum = 0
        self._hist_n = 0

        self._pushed = 0
        self._released_as_arrays = 0
        self._released = 0
        self._late = 0
        self._k_increases = 0
        self._unmeasured = 0
        self._clock_advances = 0
        self._promise_advances = 0
        self._end_flushes = 0
        self._notices_applied = 0

    # ------------------------------------------------------------------ state

    @property
    def k(self) -> int:
        return self._k

    @property
    def clk(self) -> int | None:
        return self._clk

    @property
    def buffered(self) -> int:
        return self._n_buf

    @property
    def late_count(self) -> int:
        return self._late

    @property
    def k_increases(self) -> int:
        return self._k_increases

    @property
    def released_count(self) -> int:
        """Events handed on in order (late events are counted in ``late_count`` instead)."""
        return self._released

    @property
    def pushed_count(self) -> int:
        return self._pushed

    # ------------------------------------------------------------------ input

    def push(self, stream: str, events: Sequence[dict]) -> Released:
        """Accept a batch of one stream's events (index order) and return what became ready.

        Releases happen only when the batch moved clk, i.e. for clock streams.
        """
        try:
            tss = [ev["ts"] for ev in events]
        except (KeyError, TypeError, IndexError) as exc:
            raise ValueError(f"{stream}: every event needs an integer 'ts' ({exc!r})") from None
        return self.push_timed(stream, tss, events)

    def push_timed(self, stream: str, tss: list[int], events: Sequence[Any]) -> Released:
        """``push`` of events whose ``ts`` the caller gives (``tss[k]`` is ``events[k]``'s): the unit then
        never looks into an event, which may be anything (a row id of ``pan.buffers.row_store``, say)."""
        pos = self._input(stream)
        m = len(events)
        if not m:
            return Released()
        if len(tss) != m:
            raise ValueError(f"{stream}: {len(tss)} ts for {m} events")
        try:
            lo, hi = min(tss), max(tss)
        except TypeError as exc:
            raise ValueError(f"{stream}: every event needs an integer 'ts' ({exc!r})") from None
        if not (_is_int(lo) and _is_int(hi)):
            raise ValueError(f"{stream}: 'ts' must be integer picoseconds, got {lo!r}..{hi!r}")
        if self._ats[pos] is not None:
            self._as_lists(pos)
        bts, bev = self._bts[pos], self._bev[pos]
        in_order = m == 1 or sorted(tss) == tss
        if in_order and (not bts or bts[-1] <= tss[0]):
            bts += tss
            bev += events
        else:
            self._insert_unordered(bts, bev, tss, events, lo)
        return self._after_push(pos, tss, hi, in_order)

    def push_rows(self, stream: str, tss: np.ndarray, ids: np.ndarray) -> Released:
        """``push_timed`` of a batch of row ids as int64 arrays (``tss[k]`` is ``ids[k]``'s ts): the batch is
        held, merged and released as arrays, with no Python object per row (the unit keeps both arrays)."""
        pos = self._input(stream)
        m = len(ids)
        if not m:
            return Released()
        if tss.shape != (m,) or ids.shape != (m,) or tss.dtype != np.int64 or ids.dtype != np.int64:
            raise ValueError(f"{stream}: ts and ids must be int64 arrays of one length, got {tss.dtype}{tss.shape} "
                             f"and {ids.dtype}{ids.shape}")
        if self._bev[pos]:  # the stream's run is held in the lists: it becomes arrays if it is ids alone
            if not all(type(event) is int for event in self._bev[pos]):
                return self.push_timed(stream, tss.tolist(), ids.tolist())  # else the batch joins the lists
            self._as_arrays(pos)
        hi = int(tss.max())
        in_order = m == 1 or bool((tss[1:] >= tss[:-1]).all())
        run_ts, run_ids, sorted_run = tss, ids, in_order
        held_ts, held_ids = self._ats[pos], self._aev[pos]
        if held_ts is not None and held_ids is not None:
            run_ts, run_ids = np.concatenate((held_ts, tss)), np.concatenate((held_ids, ids))
            sorted_run = in_order and bool(held_ts[-1] <= tss[0])
        if not sorted_run:  # stable: equal ts keep index order, the held ones first
            order = np.argsort(run_ts, kind="stable")
            run_ts, run_ids = run_ts[order], run_ids[order]
        self._ats[pos], self._aev[pos] = run_ts, run_ids
        return self._after_push(pos, tss, hi, in_order)

    def _input(self, stream: str) -> int:
        pos = self._pos.get(stream)
        if pos is None:
            raise ValueError(f"unknown input stream {stream!r}; inputs are {list(self.streams)}")
        return pos

    def _as_lists(self, pos: int) -> None:
        """The stream's run, held as arrays, goes into the lists (a batch of another form came)."""
        held_ts, held_ids = self._ats[pos], self._aev[pos]
        self._ats[pos] = self._aev[pos] = None
        if held_ts is not None and held_ids is not None:
            self._bts[pos] += held_ts.tolist()
            self._bev[pos] += held_ids.tolist()

    def _as_arrays(self, pos: int) -> None:
        """The stream's run, held in the lists and all ids, becomes arrays (a batch of ids came)."""
        self._ats[pos] = np.array(self._bts[pos], dtype=np.int64)
        self._aev[pos] = np.array(self._bev[pos], dtype=np.int64)
        self._bts[pos], self._bev[pos] = [], []

    def _first_ts(self, pos: int) -> int:
        held_ts = self._ats[pos]
        return self._bts[pos][0] if held_ts is None else int(held_ts[0])

    def _after_push(self, pos: int, tss: list[int] | np.ndarray, hi: int, in_order: bool) -> Released:
        """After a batch of ``len(tss)`` events went into the run of stream ``pos``: heads, progress, delays, and
        the release if the clock moved."""
        m = len(tss)
        first = self._first_ts(pos)
        head = self._head[pos]
        if head is None or first < head:
            self._head[pos] = first
            heappush(self._heads, (first, pos))
        self._n_buf += m
        self._pushed += m
        old = self._max_ts[pos]
        if old is None or hi > old:
            self._max_ts[pos] = hi
            prog = self._prog[pos]
            if prog is None or hi > prog:
                self._prog[pos] = hi
        if self._ended[pos]:  # the stream goes on after its end after all
            self._ended[pos] = False
            self._n_ended -= 1
            self._refresh_clock()
        if self._watermark:
            return self._push_watermark(pos, tss, old, in_order)

        if not self._is_clock[pos]:
            # Delay of a non-clock event = clk after the next clock event - ts (seed 001 §II-E).
            if self._pending_n < self.settings.window:
                self._pending.append((pos, tss if isinstance(tss, list) else tss.tolist(), self._clk))
                self._pending_n += m
            else:
                self._unmeasured += m
            return Released()

        first_new = int(tss[0])
        clk0 = self._clk if self._clk is not None else first_new
        if in_order and first_new >= clk0:  # fast path: every delay is 0
            if self._pending:
                self._measure_pending(first_new)
            self._record_zeros(m)
            new_clk = int(tss[-1])
        else:
            if self._pending:
                self._measure_pending(max(clk0, first_new))
            ds, new_clk = _delays(clk0, tss)  # against the running clock; zeros are only counted
            if m > len(ds):
                self._record_zeros(m - len(ds))
            if ds:
                self._record(ds, pos)
        if self._clk is None or new_clk > self._clk:
            self._clock_advances += 1
        self._clk = new_clk
        self._update_k()
        return self._release()

    def _push_watermark(self, pos: int, tss: list[int] | np.ndarray, old_max: int | None,
                        in_order: bool) -> Released:
        """clk = the slowest active stream's progress; K only has to cover disorder within a stream.

        Every input stream is nearly sorted by ts, so once each stream has passed
        t nothing older than t can still come, except out of order within its own
        stream; that is what the delays measure here (against the stream's own
        running maximum). Late events then depend on disorder inside streams, not
        on how fast each stream happens to be delivered, which keeps output
        identical from run to run.
        """
        running = old_max if old_max is not None else int(tss[0])
        if in_order and tss[0] >= running:
            self._record_zeros(len(tss))
        else:
            ds, _ = _delays(running, tss)
            if len(tss) > len(ds):
                self._record_zeros(len(tss) - len(ds))
            if ds:
                self._record(ds, pos)
        self._update_k()
        return self._advance_watermark()

    def promise(self, stream: str, ts: int) -> Released:
        """The producer of ``stream`` guarantees nothing older than ``ts`` will follow.

        A promise is progress, never a delay measurement: it moves the watermark
        (watermark mode) or, on a clock stream, clk (max mode), so a quiet or
        sparse stream does not hold the unit back. ``ts >= END_OF_STREAM`` ends
        the stream: it stops counting, and once every input has ended everything
        buffered is released. Events that still come for a stream are handled as
        usual (older than what was released: late, and counted).
        """
        pos = self._pos.get(stream)
        if pos is None:
            raise ValueError(f"unknown input stream {stream!r}")
        if not _is_int(ts):
            return Released()  # not a promise (a producer's meta is not trusted to be well-formed)
        if ts >= END_OF_STREAM:
            if self._ended[pos]:
                return Released()
            self._ended[pos] = True
            self._n_ended += 1
            if self.ended:
                self._end_flushes += 1
                return self._release(everything=True)
            self._refresh_clock()
            return self._advance_watermark() if self._watermark else self._advance_clock()
        current = self._promised[pos]
        if current is not None and ts <= current:
            return Released()
        self._promised[pos] = ts
        prog = self._prog[pos]
        if prog is None or ts > prog:
            self._prog[pos] = ts
        if self._watermark:
            return self._advance_watermark()
        if self._is_clock[pos] and not self._ended[pos]:
            return self._advance_clock()
        return Released()

    @property
    def ended(self) -> bool:
        """Every input has promised its end (and sent nothing since)."""
        return self._n_ended == len(self._ended)

    @property
    def release_limit(self) -> int | None:
        """Every event with ts up to this value has been released (None before the first clock).

        ``END_OF_STREAM`` once every input has ended.
        """
        if self.ended:
            return END_OF_STREAM
        if self._clk is None:
            return None
        return self._clk - self._k - self._tie

    def _progress(self, pos: int) -> int | None:
        """How far a stream is known to have come: its largest ts or promise."""
        return self._prog[pos]

    def _refresh_clock(self) -> None:
        """Max mode: the clock streams still running; once all have ended, the fallback streams take over."""
        if self._watermark:
            return
        names = self.streams
        live = [s in self._clock_set and not e for s, e in zip(names, self._ended, strict=True)]
        if not any(live):
            live = [s in self._fallback_set and not e for s, e in zip(names, self._ended, strict=True)]
        if live != self._is_clock:
            self._is_clock = live
            # Waiting measurements may now belong to a clock stream: they are not measured.
            self._unmeasured += self._pending_n
            self._pending.clear()
            self._pending_n = 0

    def _advance_clock(self) -> Released:
        """Max mode: clk = the largest progress (ts or promise) of a running clock stream."""
        progress = [t for i, c in enumerate(self._is_clock) if c and (t := self._progress(i)) is not None]
        if not progress or (self._clk is not None and max(progress) <= self._clk):
            return Released()
        self._clk = max(progress)
        self._clock_advances += 1
        self._promise_advances += 1
        # A promise says how far a stream has come, not when (an idle promise comes idle_after_ms late
        # by design): events waiting for their measurement are measured against the clk they found
        # when they came, which is exactly how far behind they were, the delay K must cover.
        if self._pending:
            self._measure_pending(None)
            self._update_k()
        return self._release()

    def _advance_watermark(self) -> Released:
        """Move clk to the minimum progress over streams that have not ended (unseen ones block)."""
        if self.ended:
            return self._release(everything=True)
        progress = self._prog
        if self._n_ended:
            progress = [p for p, e in zip(progress, self._ended, strict=True) if not e]
        if None in progress:
            return Released()
        watermark = min(progress)  # type: ignore[type-var]
        if self._clk is None or watermark > self._clk:
            self._clk = watermark
            self._clock_advances += 1
        return self._release()

    def notice_upstream_k(self, stream: str, k_upstream: int) -> bool:
        """React to the K an upstream producer of ``stream`` reports in its ``/data`` meta.

        Acts only when that K is new or grew: the stream's events will then lag by
        the growth on top of what was measured, so that predicted delay is entered
        as a measurement (a pseudo event). Returns True if our K rose.
        """
        pos = self._pos.get(stream)
        if pos is None:
            raise ValueError(f"unknown input stream {stream!r}")
        if not _is_int(k_upstream) or k_upstream < 0:
            raise ValueError(f"upstream K must be an integer >= 0 (ps), got {k_upstream!r}")
        prev = self._up_k.get(stream)
        self._up_k[stream] = k_upstream
        if not self.settings.notices:
            return False
        seen = self._win.stream_max(pos)
        if prev is None:
            predicted = max(k_upstream, seen)
        elif k_upstream > prev:
            predicted = max(seen, prev) + (k_upstream - prev)
        else:
            return False
        if predicted <= self._win.max():
            return False
        self._notices_applied += 1
        self._win.add([predicted], None)
        old = self._k
        self._update_k()
        return self._k > old

    def flush(self) -> Released:
        """Release everything buffered, in order (end of input)."""
        return self._release(everything=True)

    # ------------------------------------------------------------------ internals

    @staticmethod
    def _insert_unordered(bts: list[int], bev: list[dict], tss: list[int], events: Sequence[dict], lo: int) -> None:
        """Merge a batch into a stream's run; only the tail from ``lo`` on is re-sorted."""
        j = bisect_right(bts, lo)
        region_ts = bts[j:] + tss
        region_ev = bev[j:] + list(events)
        order = sorted(range(len(region_ts)), key=region_ts.__getitem__)  # stable: index order kept
        bts[j:] = [region_ts[i] for i in order]
        bev[j:] = [region_ev[i] for i in order]

    def _measure_pending(self, clk: int | None) -> None:
        """Measure the waiting events against ``clk`` (None: against the clk each batch found)."""
        for pos, tss, found in self._pending:
            if clk is None:
                if found is None:
                    self._unmeasured += len(tss)
                    continue
                self._record([found - t if t < found else 0 for t in tss], pos)
                continue
            self._record([clk - t if t < clk else 0 for t in tss], pos)
        self._pending.clear()
        self._pending_n = 0

    def _record(self, ds: list[int], pos: int) -> None:
        self._win.add(ds, pos)
        hist = self._hist
        if len(ds) <= 24:
            for d in ds:
                hist[bisect_left(DELAY_BUCKETS_PS, d)] += 1
        else:
            sds = sorted(ds)
            below = 0
            for i, le in enumerate(DELAY_BUCKETS_PS):
                c = bisect_right(sds, le)
                hist[i] += c - below
                below = c
            hist[-1] += len(sds) - below
        self._hist_sum += sum(ds)
        self._hist_n += len(ds)

    def _record_zeros(self, m: int) -> None:
        self._win.add_zeros(m)
        self._hist[0] += m
        self._hist_n += m

    def _update_k(self) -> None:
        s = self.settings
        win = self._win
        if win.n == 0:
            k = s.initial_k
        else:
            k = math.ceil(win.max() + s.lam * win.std())
            if win.total < s.window:  # warm-up: the offline estimate is a floor
                k = max(k, s.initial_k)
        k = min(max(k, s.min_k), s.max_k)
        if k > self._k:
            self._k_increases += 1
        self._k = k

    def _release(self, everything: bool = False) -> Released:
        if not self._n_buf or (self._clk is None and not everything):
            return Released()
        # In watermark mode a stream at ts t may still bring more events at t: release strictly below.
        limit = math.inf if everything else self._clk - self._k - self._tie
        pieces = self._cut(limit)
        if not pieces:
            return Released()
        self._n_buf -= sum(len(ts) for _pos, ts, _events in pieces)
        if all(isinstance(events, np.ndarray) for _pos, _ts, events in pieces):
            return self._merge_arrays(pieces)  # type: ignore[arg-type]
        return self._merge_lists([(pos, _as_list(ts), _as_list(events)) for pos, ts, events in pieces])

    def _cut(self, limit: float) -> list[tuple[int, list[int] | np.ndarray, list[Any] | np.ndarray]]:
        """The events up to ``limit`` of every stream with some due, in stream order: (position, ts, events)."""
        heads, head = self._heads, self._head
        due = []
        while heads and heads[0][0] <= limit:
            ts, pos = heappop(heads)
            if head[pos] == ts:
                head[pos] = None
                due.append(pos)
        due.sort()  # in stream order, so that a stable sort breaks ties by position
        pieces: list[tuple[int, list[int] | np.ndarray, list[Any] | np.ndarray]] = []
        for pos in due:
            pieces.append((pos, *self._cut_run(pos, limit)))
            if self._ats[pos] is not None or self._bts[pos]:  # the rest waits: its head goes back on the heap
                head[pos] = self._first_ts(pos)
                heappush(heads, (head[pos], pos))
        return pieces

    def _cut_run(self, pos: int, limit: float) -> tuple[list[int] | np.ndarray, list[Any] | np.ndarray]:
        """Take the ts and events up to ``limit`` off stream ``pos``'s run, in whichever form it is held."""
        held_ts, held_ids = self._ats[pos], self._aev[pos]
        if held_ts is not None and held_ids is not None:
            cut = len(held_ts) if held_ts[-1] <= limit else int(np.searchsorted(held_ts, limit, side="right"))
            self._ats[pos], self._aev[pos] = (held_ts[cut:], held_ids[cut:]) if cut < len(held_ts) else (None, None)
            return held_ts[:cut], held_ids[:cut]
        bts, bev = self._bts[pos], self._bev[pos]
        cut = len(bts) if bts[-1] <= limit else bisect_right(bts, limit)
        taken = bts[:cut], bev[:cut]
        del bts[:cut], bev[:cut]
        return taken

    def _merge_lists(self, pieces: list[tuple[int, list[int], list[Any]]]) -> Released:
        """Merge the streams' due events by (ts, stream position) and split off the late ones."""
        out = Released()
        all_ts: list[int] = []
        all_ev: list[Any] = []
        starts: list[int] = []  # where each contributing stream's piece begins
        owners: list[int] = []
        for pos, ts, events in pieces:
            starts.append(len(all_ts))
            owners.append(pos)
            all_ts += ts
            all_ev += events
        n = len(all_ts)
        if len(owners) > 1:
            order = sorted(range(n), key=all_ts.__getitem__)  # stable: ties keep stream order
            all_ev = list(map(all_ev.__getitem__, order))
        else:
            order = range(n)

        def owner(k: int) -> int:
            return owners[bisect_right(starts, order[k]) - 1]

        # Only a prefix can be behind what was released before.
        rts, rpos = self._rel_key
        n_late = 0
        if all_ts[order[0]] <= rts:
            while n_late < n:
                ts = all_ts[order[n_late]]
                if ts > rts or (ts == rts and owner(n_late) >= rpos):
                    break
                n_late += 1
        return self._split_late(out, all_ev, n_late, (all_ts[order[-1]], owner(n - 1)))

    def _merge_arrays(self, pieces: list[tuple[int, np.ndarray, np.ndarray]]) -> Released:
        """``_merge_lists`` of pieces that are all arrays, with one stable ``argsort``."""
        if len(pieces) == 1:
            pos, all_ts, all_ids = pieces[0]
            owners = None
        else:
            all_ts = np.concatenate([ts for _pos, ts, _ids in pieces])
            all_ids = np.concatenate([ids for _pos, _ts, ids in pieces])
            owners = np.repeat(np.array([pos for pos, _ts, _ids in pieces]), [len(ts) for _pos, ts, _ids in pieces])
            order = np.argsort(all_ts, kind="stable")  # stable: ties keep stream order
            all_ts, all_ids, owners = all_ts[order], all_ids[order], owners[order]
            pos = int(owners[-1])
        # Late: behind the last released key (ts, position), i.e. a prefix of the sorted events.
        rts, rpos = self._rel_key
        n_late = 0
        if all_ts[0] <= rts:
            below = int(np.searchsorted(all_ts, rts, side="left"))
            upto = int(np.searchsorted(all_ts, rts, side="right"))
            if owners is None:  # ties with the last released key are late if their stream comes before its
                n_late = upto if pieces[0][0] < rpos else below
            else:
                n_late = below + int(np.searchsorted(owners[below:upto], rpos, side="left"))
        self._released_as_arrays += len(all_ids)
        return self._split_late(Released(), all_ids, n_late, (int(all_ts[-1]), pos))

    def _split_late(self, out: Released, events: list[Any] | np.ndarray, n_late: int,
                    last_key: tuple[int, int]) -> Released:
        """``events`` (merged, the first ``n_late`` late) handed on by the late policy; ``last_key``: the (ts,
        position) of the last one."""
        n = len(events)
        if n_late:
            out.late = events[:n_late]
            self._late += n_late
        out.events = events if self._deliver or not n_late else events[n_late:]
        if n_late < n:
            self._rel_key = last_key
            self._released += n - n_late
        return out

    # ------------------------------------------------------------------ reporting

    def delay_histogram(self) -> dict[str, Any]:
        """Measured delays (clk - ts, ps) as Prometheus-style cumulative buckets."""
        cum, buckets = 0, []
        for le, c in zip((*DELAY_BUCKETS_PS, math.inf), self._hist, strict=True):
            cum += c
            buckets.append((le, cum))
        return {"buckets": buckets, "sum_ps": self._hist_sum, "count": self._hist_n}

    def progress(self) -> StreamProgress:
        """What the producer puts in ``/data`` meta; ``k`` is what downstream units react to."""
        return StreamProgress.from_json({"k": self._k, "clk": self._clk, "late": self._late})

    def metrics(self) -> dict[str, Any]:
        """Values for ``/metrics`` and ``/streams``."""
        return {
            "k": self._k,
            "clk": self._clk,
            "buffered": self._n_buf,
            "late": self._late,
            "k_increases": self._k_increases,
            "pushed": self._pushed,
            "released": self._released,
            "released_as_arrays": self._released_as_arrays,  # late ones too: events the array merge handed on
            "unmeasured": self._unmeasured,
            "promise_advances": self._promise_advances,
            "ended_inputs": sum(self._ended),
            "end_flushes": self._end_flushes,
            "notices_applied": self._notices_applied,
            "upstream_k": dict(self._up_k),
            "delay_histogram": self.delay_histogram(),
        }
