"""Ordering units: adaptive K-slack in front of every component (docs/ordering.md).

A unit merges a component's input streams into one stream sorted by ``ts``.
It holds every event until ``ts + K <= clk``, where ``clk`` is moved only by
designated clock streams and K is learnt from the delays the unit observes.
Everything here is pure computation: no wall time at all. A quiet input is
covered by its producer's promises (the forwarder declares idle inputs at the
edge), and the end of an input is a promise of ``END_OF_STREAM``.

The unit is made of parts, each in its own module: the runs it holds and releases from
(``pan/ordering/runs.py``), the delays K is learnt from (``pan/ordering/delays.py``) and how
clk moves (``pan/ordering/clock.py``); its settings are in ``pan/ordering/settings.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from heapq import heappush
from typing import Any

import numpy as np

from pan.ordering.clock import ClockModes
from pan.ordering.delays import DELAY_BUCKETS_PS, DelayWindow, delays
from pan.ordering.released import Released
from pan.ordering.settings import OrderingSettings, is_int
from pan.wire.progress import StreamProgress

_NO_KEY = (-math.inf, -1)


# --------------------------------------------------------------------------- the unit


class OrderingUnit(ClockModes):
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
        self._win = DelayWindow(settings.window, len(streams))
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

    def held(self, stream: str) -> int:
        """Events of ``stream`` buffered now."""
        pos = self._input(stream)
        run = self._ats[pos]
        return len(self._bts[pos]) + (0 if run is None else len(run))

    def leads(self, stream: str) -> bool:
        """Watermark mode: ``stream`` has come further than another input that has not ended, so what it
        brings now waits for that one (False in max mode, where only clk and K decide)."""
        if not self._watermark:
            return False
        pos = self._input(stream)
        mine = self._prog[pos]
        if mine is None or self._ended[pos]:
            return False
        return any(not ended and (other is None or other < mine)
                   for i, (other, ended) in enumerate(zip(self._prog, self._ended, strict=True)) if i != pos)

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
        if not (is_int(lo) and is_int(hi)):
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
            ds, new_clk = delays(clk0, tss)  # against the running clock; zeros are only counted
            if m > len(ds):
                self._record_zeros(m - len(ds))
            if ds:
                self._record(ds, pos)
        if self._clk is None or new_clk > self._clk:
            self._clock_advances += 1
        self._clk = new_clk
        self._update_k()
        return self._release()

    def flush(self) -> Released:
        """Release everything buffered, in order (end of input)."""
        return self._release(everything=True)

    # ------------------------------------------------------------------ reporting

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
