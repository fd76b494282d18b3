"""Speculative ordering units: release part of the K-slack buffer early, replay on a mistake.

A buffering unit (``pan/ordering/unit.py``) holds every event until ``ts + K <= clk``.
The speculative unit wraps one and emits an event to its component as soon as
``ts + alpha*K <= clk`` (seed 002 §4.1), keeping it in its own buffer until the
buffering rule *settles* it. Before each batch of premature events it asks the
component for a snapshot (the seed takes one per event); an event that then
arrives in front of the already-emitted pointer (AEP) makes it restore the
snapshot of the batch holding the earliest affected event and replay the buffer
from there in order. The component never learns about any of
this: snapshots are taken and restored by the middleware (``OrderedComponent``).

Settling follows the inner unit: K, clk, promises, the end, late events and the
delay measurements are exactly the buffering unit's, except that the speculative
unit settles strictly below ``clk - K`` in max mode too (Algorithm 2's purge), so an
event tied with ``clk - K`` stays replayable one clock step longer. Settled events
are final: what the component made of them can no longer change.

Inputs read in a speculative producer's raw view (``raw_streams``) count for emission at once but
reach the settling unit only once their producer has settled them; a retraction from such a producer
(``retract``) withdraws the events it revoked and replays if the component had processed any (seed 002
§4.3). Whether the replay changes what the component emits is decided at its outputs
(``OutputStream.replay_from``), so a retraction goes on downstream only if it does.

Pure computation like the buffering unit: no I/O, no wall time.

Here the unit itself: its buffer, insertion, settling and replay. Its parts of their own sit beside it: the
``ordering`` object (``pan/ordering/speculation_settings.py``), ``alpha: "auto"``
(``pan/ordering/alpha_controller.py``), the buffer's sort key (``pan/ordering/speculation_keys.py``), the
settling unit inside (``pan/ordering/settling.py``), raw inputs (``pan/ordering/raw_inputs.py``) and premature
emission with its snapshots (``pan/ordering/emission.py``).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from fractions import Fraction
from operator import itemgetter
from typing import Any, Protocol

from pan.ordering.alpha_controller import AlphaController
from pan.ordering.emission import SAME, PrematureEmission
from pan.ordering.raw_inputs import RawInputs
from pan.ordering.released import Released
from pan.ordering.settings import OrderingSettings
from pan.ordering.settling import SettlingUnit
from pan.ordering.speculation_keys import POS_BITS, key_pos, sort_key
from pan.ordering.speculation_settings import AUTO, SpeculationSettings
from pan.wire.progress import StreamProgress

SMALL_BATCH = 32  # up to this many events a batch is inserted one by one, more are merged as slices


class SpeculationTarget(Protocol):
    """What the unit drives: the component behind it (its state, as opaque bytes)."""

    def snapshot(self) -> bytes: ...

    def restore(self, snapshot: bytes) -> None: ...

    def process(self, events: list[dict]) -> None: ...


class SpeculativeUnit(RawInputs, PrematureEmission):
    """A buffering unit plus premature emission, snapshots and replay (seed 002, Algorithms 1-2).

    The buffer holds every event that is not settled yet, sorted by (ts, stream
    position, arrival), the buffering unit's order. ``self._aep`` counts the
    emitted entries at its front. The events emitted by one call go to the component
    in one batch, with one snapshot of its state before the batch (the first entry's;
    the others are ``SAME``): a state copy per event costs as much as the work itself
    for a component with a large state, and a batch keeps the component's
    array paths. An event landing inside a batch replays from the batch's start; what
    is emitted again unchanged withdraws nothing (``OutputStream.replay_from``). Two
    consecutive equal snapshots are one object.
    """

    def __init__(
        self,
        settings: OrderingSettings,
        streams: Sequence[str],
        target: SpeculationTarget,
        speculation: SpeculationSettings | None = None,
        raw_streams: Sequence[str] = (),
    ) -> None:
        """``raw_streams``: inputs read in their producer's raw view (a speculative producer's unsettled
        tuples too, and its retractions, ``retract``); ``upstream_settled`` says which of them are final."""
        if len(streams) >= 1 << POS_BITS:
            raise ValueError(f"a speculative unit takes fewer than {1 << POS_BITS} inputs, got {len(streams)}")
        self.inner = SettlingUnit(settings, streams)
        self.settings = settings
        self.streams = self.inner.streams
        self.target = target
        self.speculation = speculation or SpeculationSettings()
        alpha = self.speculation.alpha
        self._alpha: Fraction = Fraction(1) if alpha == AUTO else Fraction(alpha)
        #: ``alpha: "auto"``: the controller the worker reports its busy factor to (``adapt``).
        self.controller: AlphaController | None = AlphaController() if alpha == AUTO else None
        self._watermark = settings.clock_mode == "watermark"
        self._pos = {s: i for i, s in enumerate(self.streams)}
        self._keys: list[int] = []  # ``sort_key``s, sorted
        self._events: list[dict] = []
        self._snaps: list[Any] = []  # bytes, SAME or None, per emitted entry: the state before its batch (None: final)
        #: Settled events processed after the front entry's snapshot, before it (its batch's settled start):
        #: a restore to that snapshot processes them again first.
        self._front_prefix: list[dict] = []
        self._aep = 0
        self._seq = 0
        self._held: dict[int, list[Any]] = {}  # id(snapshot) -> [snapshot, references]
        self.snapshot_bytes = 0
        self.max_snapshot_bytes_seen = 0
        self.snapshots_taken = 0
        self.snapshots_shared = 0
        self.premature = 0
        self.replays = 0
        self.replayed_events = 0
        self.restores = 0
        self.fallbacks = 0  # times the snapshot cap stopped speculation
        self.capped = False
        n = len(self.streams)
        self._raw = [s in set(raw_streams) for s in self.streams]
        #: Per raw input: the producer's newest final index (None: every tuple is final), the events after
        #: it (not given to the settling unit yet, in index order), and the largest ts among those.
        self._upstream_settled: list[int | None] = [None] * n
        self._unsettled: list[list[dict]] = [[] for _ in range(n)]
        self._unsettled_max: list[int | None] = [None] * n
        #: Per raw input: its producer's raw watermark (``raw_promise``), how far its raw view has come.
        self._raw_promised: list[int | None] = [None] * n
        #: Per input: how far its raw view has come (the larger of the two above), and how many are known.
        self._raw_seen: list[int | None] = [None] * n
        self._raw_seen_count = 0
        self._alpha_k: tuple[int, int] | None = None  # (K, alpha*K rounded as the emission rule needs it)
        self.retractions_received = [0] * n  # retract notices that withdrew events this unit held
        self.withdrawn_events = [0] * n
        self.input_replays = [0] * n  # replays, by the input whose event (or retraction) caused them

    # ------------------------------------------------------------------ state

    @property
    def alpha(self) -> Fraction:
        return self._alpha

    @alpha.setter
    def alpha(self, value: float | Fraction) -> None:
        value = Fraction(value).limit_denominator(10**6)
        if not 0 <= value <= 1:
            raise ValueError(f"alpha must be in [0, 1], got {value}")
        self._alpha = value
        self._alpha_k = None

    def adapt(self, busy: float) -> None:
        """``alpha: "auto"``: the share of the last span the component worked; moves alpha (Algorithm 3)."""
        if self.controller is not None:
            self.alpha = self.controller.update(busy)

    @property
    def k(self) -> int:
        return self.inner.k

    @property
    def clk(self) -> int | None:
        return self.inner.clk

    @property
    def ended(self) -> bool:
        return self.inner.ended

    @property
    def release_limit(self) -> int | None:
        """Every event up to this ts is settled (final); see ``OrderingUnit.release_limit``."""
        return self.inner.release_limit

    @property
    def buffered(self) -> int:
        return len(self._keys)

    @property
    def emitted_unsettled(self) -> int:
        """Events the component has processed that may still be replayed (the AEP's position)."""
        return self._aep

    @property
    def late_count(self) -> int:
        return self.inner.late_count

    def progress(self) -> StreamProgress:
        return self.inner.progress()

    # ------------------------------------------------------------------ input

    def push(self, stream: str, events: Sequence[dict]) -> Released:
        """Insert a batch (replaying if it lands in front of the AEP), settle, emit what is due.

        Returns the events settled by this call (already processed by the target,
        ``events``) and the late ones (``late``), as the buffering unit would.
        """
        pos = self._pos.get(stream)
        if pos is None:
            raise ValueError(f"unknown input stream {stream!r}; inputs are {list(self.streams)}")
        if not events:
            return Released()
        for ev in events:
            ts = ev.get("ts") if type(ev) is dict or isinstance(ev, Mapping) else None  # the ABC check is slow
            if type(ts) is not int:
                raise ValueError(f"{stream}: every event needs an integer 'ts', got {ts!r}")
        self._insert(pos, events)
        if not self._raw[pos]:
            return self._after(self.inner.push(stream, events))
        released = self._settle_input(pos)
        settled = self._upstream_settled[pos]
        final = events if settled is None else [ev for ev in events if ev.get("i", -1) <= settled]
        if len(final) < len(events):
            rest = events[len(final):]
            self._unsettled[pos].extend(rest)
            top = max(ev["ts"] for ev in rest)
            current = self._unsettled_max[pos]
            self._unsettled_max[pos] = top if current is None or top > current else current
            self._note_raw(pos)
        if final:
            released.extend(self.inner.push(stream, final))
        return self._after(released)

    def _insert(self, pos: int, events: Sequence[dict]) -> None:
        """Sort a batch into the buffer; one landing in front of the AEP makes the unit restore and replay."""
        rts, rpos = self.inner.settled_key
        fresh: list[tuple[int, dict]] = []
        for ev in events:
            ts = ev["ts"]
            self._seq += 1
            if ts < rts or (ts == rts and pos < rpos):
                continue  # behind what is settled: late, reported by the inner unit
            fresh.append((sort_key(ts, pos, self._seq), ev))
        if not fresh:
            return
        fresh.sort(key=itemgetter(0))  # keys are unique (arrival numbers): events are never compared
        first = fresh[0][0]
        if self._aep and first < self._keys[self._aep - 1]:
            self._rewind(bisect_right(self._keys, first), pos)
        at = bisect_right(self._keys, first)
        if at < len(self._snaps):  # only unemitted entries lie behind the AEP
            raise AssertionError("speculative buffer: insertion in front of the AEP after a rewind")
        keys, evs = self._keys, self._events
        if at == len(keys):  # after everything buffered (in order): append
            keys.extend([key for key, _ in fresh])
            evs.extend([ev for _, ev in fresh])
            return
        if len(fresh) <= SMALL_BATCH:
            for key, ev in fresh:
                p = bisect_right(keys, key, at)
                keys.insert(p, key)
                evs.insert(p, ev)
            return
        # One merge of the batch into the buffer's tail: a bisect per event and the runs between them copied
        # as slices (inserting event by event moves the tail once per event, and merging pair by pair in
        # Python costs the tail's length per call: each was most of a busy unit's time with 37 inputs).
        tail_keys: list[int] = []
        tail_events: list[dict] = []
        prev = at
        for key, ev in fresh:
            p = bisect_right(keys, key, prev)
            tail_keys += keys[prev:p]
            tail_events += evs[prev:p]
            tail_keys.append(key)
            tail_events.append(ev)
            prev = p
        tail_keys += keys[prev:]
        tail_events += evs[prev:]
        keys[at:] = tail_keys
        evs[at:] = tail_events

    def promise(self, stream: str, ts: int) -> Released:
        """Progress of ``stream`` (see ``OrderingUnit.promise``); may settle and emit."""
        return self._after(self.inner.promise(stream, ts))

    def notice_upstream_k(self, stream: str, k_upstream: int) -> bool:
        return self.inner.notice_upstream_k(stream, k_upstream)

    def flush(self) -> Released:
        """Settle and emit everything (offline use, tests); raw inputs' unsettled events count as final."""
        released = Released()
        for pos in range(len(self.streams)):
            self._upstream_settled[pos] = None
            released.extend(self._settle_input(pos))
        released.extend(self.inner.flush())
        return self._after(released, everything=True)

    # ------------------------------------------------------------------ internals

    def _rewind(self, to: int, cause: int) -> None:
        """Restore the state from before entry ``to`` and mark it and everything after as not emitted.

        The snapshot is that of ``to``'s batch: the batch's events before ``to`` are processed again (they keep
        the batch's snapshot), and so are the front batch's settled events before it (``_front_prefix``).
        """
        start = to
        while start > 0 and self._snaps[start] is SAME:
            start -= 1
        snap = self._snaps[start]
        if snap is None or snap is SAME:  # pragma: no cover - every emitted, unsettled batch has one
            raise AssertionError("speculative buffer: emitted entry without a snapshot")
        self.target.restore(snap)
        if start == 0 and self._front_prefix:  # final events: processed again, no snapshot needed
            self.target.process(self._front_prefix)
            if to == 0:  # the next batch's snapshot is taken after them
                self._front_prefix = []
        if start < to:
            self.target.process(self._events[start:to])
        self.replays += 1
        self.input_replays[cause] += 1
        self.restores += 1
        self.replayed_events += self._aep - start
        for s in self._snaps[to:]:
            self._release_snapshot(s)
        del self._snaps[to:]
        self._aep = to

    def _after(self, released: Released, everything: bool = False) -> Released:
        """Settle what the inner unit released, then emit what the speculation rule lets go."""
        late_ids = {id(e) for e in released.late}
        settled = [e for e in released.events if id(e) not in late_ids]
        n = len(settled)
        if n:
            if n > len(self._events) or any(a is not b for a, b in zip(self._events[:n], settled, strict=False)):
                self._drop_overtaken(settled)
            if n > self._aep:  # due now and final: no snapshot needed
                self.target.process(self._events[self._aep : n])
                self._snaps.extend([None] * (n - self._aep))
                self._aep = n
            self._settle_front(n)
        if released.late and self.settings.late_policy == "deliver":
            self.target.process(list(released.late))
        self._emit(everything or self.inner.ended)
        return Released(events=settled, late=released.late)

    def _settle_front(self, n: int) -> None:
        """The first ``n`` entries are settled: they leave the buffer with their snapshots. If a batch goes on
        after them, its snapshot moves to the new front, with its settled events kept to process again."""
        if n < len(self._snaps) and self._snaps[n] is SAME:
            start = n
            while start > 0 and self._snaps[start] is SAME:
                start -= 1
            snap = self._snaps[start]
            assert snap is not None and snap is not SAME
            self._held[id(snap)][1] += 1
            self._snaps[n] = snap
            self._front_prefix = (self._front_prefix if start == 0 else []) + self._events[start:n]
        else:
            self._front_prefix = []
        for s in self._snaps[:n]:
            self._release_snapshot(s)
        del self._keys[:n], self._events[:n], self._snaps[:n]
        self._aep -= n

    def _drop_overtaken(self, settled: list[dict]) -> None:
        """Raw events the settling unit has passed before they were final leave the buffer (they come back
        as late events once final, as in a buffering unit); the settled events are then its front."""
        ids = {id(ev) for ev in settled}
        last = max((n for n, ev in enumerate(self._events) if id(ev) in ids), default=-1)
        stray = [n for n in range(last + 1) if id(self._events[n]) not in ids]
        if last + 1 != len(settled) + len(stray) or not stray:
            raise AssertionError("speculative buffer out of step with the buffering unit")
        if stray[0] < self._aep:
            self._rewind(stray[0], key_pos(self._keys[stray[0]]))
        for n in reversed(stray):
            del self._keys[n], self._events[n]

    # ------------------------------------------------------------------ reporting

    def metrics(self) -> dict[str, Any]:
        out = self.inner.metrics()
        out["buffered"] = len(self._keys)
        out["speculation"] = {
            "alpha": float(self._alpha),
            "alpha_mode": AUTO if self.speculation.alpha == AUTO else "fixed",
            "emitted_unsettled": self._aep,
            "premature": self.premature,
            "replays": self.replays,
            "replayed_events": self.replayed_events,
            "snapshots_taken": self.snapshots_taken,
            "snapshots_shared": self.snapshots_shared,
            "snapshot_bytes": self.snapshot_bytes,
            "snapshot_bytes_peak": self.max_snapshot_bytes_seen,
            "max_snapshot_bytes": self.speculation.max_snapshot_bytes,
            "capped": self.capped,
            "fallbacks": self.fallbacks,
            "alpha_resets": self.controller.resets if self.controller is not None else 0,
            "raw_inputs": [stream for stream, raw in zip(self.streams, self._raw, strict=True) if raw],
            # Per input, one map per counter (so /metrics labels them by stream).
            "inputs": {
                "replays": dict(zip(self.streams, self.input_replays, strict=True)),
                "retractions_received": dict(zip(self.streams, self.retractions_received, strict=True)),
                "withdrawn_events": dict(zip(self.streams, self.withdrawn_events, strict=True)),
                "unsettled": {s: len(self._unsettled[p]) for s, p in self._pos.items() if self._raw[p]},
                "upstream_settled": {s: i for s, i in zip(self.streams, self._upstream_settled, strict=True)
                                     if i is not None},
                "raw_promised": {s: t for s, t in zip(self.streams, self._raw_promised, strict=True)
                                 if t is not None},
            },
        }
        return out


__all__ = [
    "SpeculationTarget",
    "SpeculativeUnit",
]
