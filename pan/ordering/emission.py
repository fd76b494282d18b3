"""A speculative unit's premature emission: the speculation rule, the snapshot before each batch, the cap.

Events go to the component as soon as ``ts + alpha*K <= clk`` (seed 002 §4.1), with one snapshot of its
state before each batch; the snapshots held count against ``max_snapshot_bytes``. A mixin of
``SpeculativeUnit`` (``pan/ordering/speculation.py``), which holds the buffer and the state it reads (set in
its ``__init__``): apart because emitting early, and paying for it in snapshots, is a job of its own.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from typing import Any

from pan.ordering.speculation_keys import key_ts, last_key

#: In the unit's list of snapshots: an entry emitted in the same call as the one before it, whose restore point is
#: the snapshot at the start of that batch (``SpeculativeUnit._rewind``).
SAME: Any = object()


class PrematureEmission:
    """Emission ahead of settling, and the snapshots it takes, of a ``SpeculativeUnit``."""

    @property
    def oldest_snapshot(self) -> bytes | None:
        """The snapshot a replay could go back to furthest (None: nothing emitted is unsettled)."""
        return next((snap for snap in self._snaps if snap is not None and snap is not SAME), None)

    def _emit_limit(self) -> float:
        """Largest ts the speculation rule emits now (``ts + alpha*K <= clk``; strictly below in watermark mode).

        With raw inputs clk counts their unsettled events too: what is emitted early may depend on them.
        """
        clk = self.inner.clock_with(self._raw_seen) if self._raw_seen_count else self.inner.clk
        if clk is None:
            return -math.inf
        k = self.inner.k
        if self._alpha_k is None or self._alpha_k[0] != k:  # K changes rarely: no Fraction product per event
            ak = self._alpha * k
            self._alpha_k = (k, math.floor(ak) + 1 if self._watermark else math.ceil(ak))
        return clk - self._alpha_k[1]

    @property
    def emitted_limit(self) -> int | None:
        """Every event up to this ts has reached the component, prematurely or settled, and one that still
        comes below it makes the unit replay: how far the component's raw output may be promised
        (``raw_wm``). None: nothing yet."""
        settled = self.inner.release_limit
        if self.capped:
            return settled
        limit = self._emit_limit()
        if self._aep < len(self._keys):
            limit = min(limit, key_ts(self._keys[self._aep]) - 1)
        if limit == -math.inf or (settled is not None and limit <= settled):
            return settled
        return int(limit)

    def _emit(self, everything: bool) -> None:
        n = len(self._keys)
        if self._aep >= n:
            return
        limit = math.inf if everything else self._emit_limit()
        if key_ts(self._keys[self._aep]) > limit:
            return
        stop = n if limit == math.inf else bisect_right(self._keys, last_key(int(limit)))
        if everything:  # the end: nothing can come any more, so nothing needs a snapshot
            self.target.process(self._events[self._aep : stop])
            self._snaps.extend([None] * (stop - self._aep))
            self._aep = stop
            return
        snap = self._take_snapshot()
        if self.snapshot_bytes > self.speculation.max_snapshot_bytes:  # stop speculating until settling frees
            self._release_snapshot(snap)
            if not self.capped:
                self.capped = True
                self.fallbacks += 1
            return
        self.capped = False
        count = stop - self._aep
        self._snaps.append(snap)
        self._snaps.extend([SAME] * (count - 1))
        self.premature += count
        self.target.process(self._events[self._aep : stop])
        self._aep = stop

    def _take_snapshot(self) -> bytes:
        snap = self.target.snapshot()
        self.snapshots_taken += 1
        prev = next((s for s in reversed(self._snaps) if s is not SAME), None)
        if prev is not None and prev == snap:  # the state did not change: share the previous copy
            snap = prev
            self.snapshots_shared += 1
        entry = self._held.get(id(snap))
        if entry is None:
            self._held[id(snap)] = [snap, 1]
            self.snapshot_bytes += len(snap)
            self.max_snapshot_bytes_seen = max(self.max_snapshot_bytes_seen, self.snapshot_bytes)
        else:
            entry[1] += 1
        return snap

    def _release_snapshot(self, snap: bytes | None) -> None:
        if snap is None or snap is SAME:
            return
        entry = self._held[id(snap)]
        entry[1] -= 1
        if not entry[1]:
            del self._held[id(snap)]
            self.snapshot_bytes -= len(snap)


__all__ = ["SAME", "PrematureEmission"]
