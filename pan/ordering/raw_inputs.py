"""A speculative unit's raw inputs: a speculative producer's unsettled tuples, raw watermarks and retractions.

Inputs read in a speculative producer's raw view (``raw_streams``) count for emission at once but
reach the settling unit only once their producer has settled them; a retraction from such a producer
(``retract``) withdraws the events it revoked and replays if the component had processed any (seed 002
§4.3). A mixin of ``SpeculativeUnit`` (``pan/ordering/speculation.py``), which holds the state it reads
(set in its ``__init__``): apart because taking raw input is a job of its own beside ordering.
"""

from __future__ import annotations

from bisect import bisect_right

from pan.ordering.released import Released
from pan.ordering.speculation_keys import last_key


class RawInputs:
    """The raw inputs of a ``SpeculativeUnit``: what their producers settle, promise and withdraw."""

    def reads_raw(self, stream: str) -> bool:
        return self._raw[self._pos[stream]]

    def settled_index(self, stream: str) -> int | None:
        """The newest index of a raw input its producer has settled, as last told (None: every tuple is final)."""
        return self._upstream_settled[self._pos[stream]]

    def upstream_settled(self, stream: str, index: int | None) -> Released:
        """A raw input's producer says its tuples up to ``index`` are final (None: all are); they go to the
        settling unit, which may settle and emit."""
        pos = self._pos[stream]
        if index == self._upstream_settled[pos]:
            return Released()
        self._upstream_settled[pos] = index
        return self._after(self._settle_input(pos))

    def raw_promise(self, stream: str, ts: int) -> Released:
        """A raw input's producer says its raw view has no older ``ts`` to come but through a retraction
        (its ``raw_wm``). Like a raw event, it counts for emission only, never for settling: a quiet input
        (a detector's rare hits) then holds the emission back no further than its producer's speculation."""
        pos = self._pos[stream]
        current = self._raw_promised[pos]
        if not self._raw[pos] or (current is not None and ts <= current):
            return Released()
        self._raw_promised[pos] = ts
        self._note_raw(pos)
        return self._after(Released())

    def retract(self, stream: str, after: int) -> Released:
        """A raw input's producer withdrew its tuples after index ``after`` (seed 002 §4.3).

        The withdrawn events leave the buffer; if the component had processed any of them, its state goes
        back to the snapshot before the earliest and the rest is replayed, as for an out-of-order arrival.
        Events not emitted yet are simply dropped. Nothing is emitted here: the replacements come as new
        input next, and emitting before them would replay a second time.
        """
        pos = self._pos[stream]
        self._raw_promised[pos] = None  # the producer's next meta says again how far its revised view has come
        self._note_raw(pos)
        pending = self._unsettled[pos]
        keep = next((n for n, ev in enumerate(pending) if ev.get("i", -1) > after), len(pending))
        gone = pending[keep:]
        if not gone:
            return Released()
        del pending[keep:]
        self._unsettled_max[pos] = max((ev["ts"] for ev in pending), default=None)
        self._note_raw(pos)
        self.retractions_received[pos] += 1
        self.withdrawn_events[pos] += len(gone)
        ids = {id(ev) for ev in gone}
        at = [n for n, ev in enumerate(self._events) if id(ev) in ids]
        if at and at[0] < self._aep:
            # The replacements come no earlier than what is left of the input (it is in ts order): going back
            # that far now spares a second replay when one of them lands in front of what was emitted since.
            known = [ev["ts"] for ev in pending[-1:]] + [p for p in (self.inner.progress_of(pos),) if p is not None]
            start = bisect_right(self._keys, last_key(max(known), pos)) if known else 0
            self._rewind(min(at[0], start), pos)
        for n in reversed(at):
            del self._keys[n], self._events[n]
        return Released()

    def _settle_input(self, pos: int) -> Released:
        """Hand a raw input's events that became final to the settling unit."""
        pending = self._unsettled[pos]
        if not pending:
            return Released()
        settled = self._upstream_settled[pos]
        cut = len(pending) if settled is None else next(
            (n for n, ev in enumerate(pending) if ev.get("i", -1) > settled), len(pending))
        if not cut:
            return Released()
        final = pending[:cut]
        del pending[:cut]
        if not pending:
            self._unsettled_max[pos] = None
            self._note_raw(pos)
        return self.inner.push(self.streams[pos], final)

    def _note_raw(self, pos: int) -> None:
        """A raw input's unsettled events or raw watermark changed: how far its raw view has come."""
        top, promised = self._unsettled_max[pos], self._raw_promised[pos]
        seen = top if promised is None or (top is not None and top >= promised) else promised
        self._raw_seen_count += (seen is not None) - (self._raw_seen[pos] is not None)
        self._raw_seen[pos] = seen


__all__ = ["RawInputs"]
