"""The buffer of an ordering unit: one run per input stream, cut at ``clk - K`` and merged in order.

Apart from the rest of the unit (pan/ordering/unit.py): how events are held (lists, or int64 arrays of row
ids), cut and merged by (ts, stream position), with the late ones split off, whatever decides the limit.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from heapq import heappop, heappush
from typing import Any

import numpy as np

from pan.ordering.released import Released, as_list


class StreamRuns:
    """The part of ``OrderingUnit`` that holds the runs of its input streams and releases from them.

    Its state is set up in ``OrderingUnit.__init__`` (pan/ordering/unit.py), where each field is explained.
    """

    _deliver: bool
    _tie: int
    _bts: list[list[int]]
    _bev: list[list[Any]]
    _ats: list[np.ndarray | None]
    _aev: list[np.ndarray | None]
    _heads: list[tuple[int, int]]
    _head: list[int | None]
    _n_buf: int
    _clk: int | None
    _k: int
    _rel_key: tuple[float, int]
    _released_as_arrays: int
    _released: int
    _late: int

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
        return self._merge_lists([(pos, as_list(ts), as_list(events)) for pos, ts, events in pieces])

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
