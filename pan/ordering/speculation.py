"""Speculative ordering units: release part of the K-slack buffer early, replay on a mistake.

A buffering unit (``pan/ordering/units.py``) holds every event until ``ts + K <= clk``.
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
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from operator import itemgetter
from typing import Any, Protocol

from pan.ordering.units import OrderingSettings, OrderingUnit, Released
from pan.wire.progress import StreamProgress

MODES = ("buffering", "speculative")
#: Keys of a worker's ``ordering`` object (``{"mode": "speculative", "alpha": 0.33}``).
ORDERING_OBJECT_KEYS = ("mode", "alpha", "max_snapshot_bytes", "input_view", "cpu")
#: How a speculative unit reads its inputs: ``raw`` (default) takes a speculative producer's unsettled tuples
#: and retractions, so gains add up across levels; ``settled`` only what no retraction can touch.
INPUT_VIEWS = ("raw", "settled")
#: What ``alpha: "auto"`` measures: ``component`` (default), the component's share of working time (the
#: seed's busy factor); ``loop`` and ``machine``, the larger of that and a busy CPU share (pan/util/cpu_share.py),
#: of the worker's event-loop thread (waiting for a core included) or of every core. docs/ordering.md says
#: why the default changed: on this project's 2-core machine the loop's waits for a core kept alpha at 1.
CPU_SIGNALS = ("component", "loop", "machine")
DEFAULT_MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024
AUTO = "auto"
SMALL_BATCH = 32  # up to this many events a batch is inserted one by one, more are merged as slices
#: A buffer entry's sort key is one int, ``ts``, input position and arrival number packed (``_key``): ints
#: compare several times faster than tuples, and a busy unit bisects its buffer once per event.
_SEQ_BITS = 40
_POS_BITS = 16
_TS_SHIFT = _SEQ_BITS + _POS_BITS
_SEQ_MASK = (1 << _SEQ_BITS) - 1


def _key(ts: int, pos: int, seq: int) -> int:
    """The sort key of (ts, input position, arrival number); ``seq`` wraps after 2^40 events of one unit."""
    return (ts << _TS_SHIFT) | (pos << _SEQ_BITS) | (seq & _SEQ_MASK)


def _last_key(ts: int, pos: int | None = None) -> int:
    """The largest key of ``ts`` (of input ``pos``, or of any input): a bound for ``bisect_right``."""
    if pos is None:
        return ((ts + 1) << _TS_SHIFT) - 1
    return (ts << _TS_SHIFT) | (pos << _SEQ_BITS) | _SEQ_MASK


def _ts(key: int) -> int:
    return key >> _TS_SHIFT


def _pos(key: int) -> int:
    return (key >> _SEQ_BITS) & ((1 << _POS_BITS) - 1)


#: In the unit's list of snapshots: an entry emitted in the same call as the one before it, whose restore point is
#: the snapshot at the start of that batch (``SpeculativeUnit._rewind``).
_SAME: Any = object()


@dataclass(frozen=True)
class SpeculationSettings:
    """``alpha`` in [0, 1] (1: emit no earlier than buffering would) or ``"auto"`` (adapted at run time)."""

    alpha: Fraction | str = Fraction(1)
    max_snapshot_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES
    cpu: str = CPU_SIGNALS[0]

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> SpeculationSettings:
        """From a worker's ``ordering`` object; ValueError names every problem."""
        problems = validate_ordering_object(obj)
        if problems:
            raise ValueError("; ".join(problems))
        alpha = obj.get("alpha", 1)
        return cls(
            alpha=AUTO if alpha == AUTO else Fraction(alpha).limit_denominator(10**6),
            max_snapshot_bytes=obj.get("max_snapshot_bytes", DEFAULT_MAX_SNAPSHOT_BYTES),
            cpu=obj.get("cpu", CPU_SIGNALS[0]),
        )


def validate_ordering_object(obj: Any) -> list[str]:
    """Problems with a worker's ``ordering`` object, each naming its key."""
    if not isinstance(obj, Mapping):
        return [f"ordering: must be an object, got {type(obj).__name__}"]
    problems = [f"ordering.{k}: unknown key (allowed: {', '.join(ORDERING_OBJECT_KEYS)})"
                for k in obj if k not in ORDERING_OBJECT_KEYS]
    mode = obj.get("mode", "buffering")
    if mode not in MODES:
        problems.append(f"ordering.mode: must be one of {', '.join(MODES)}, got {mode!r}")
    if "alpha" in obj:
        alpha = obj["alpha"]
        if mode != "speculative":
            problems.append("ordering.alpha: only with mode speculative")
        elif alpha != AUTO and not (
            isinstance(alpha, int | float) and not isinstance(alpha, bool) and math.isfinite(alpha) and 0 <= alpha <= 1
        ):
            problems.append(f'ordering.alpha: must be a number in [0, 1] or "auto", got {alpha!r}')
    if "input_view" in obj:
        if mode != "speculative":
            problems.append("ordering.input_view: only with mode speculative")
        elif obj["input_view"] not in INPUT_VIEWS:
            problems.append(f"ordering.input_view: must be one of {', '.join(INPUT_VIEWS)}, got {obj['input_view']!r}")
    if "cpu" in obj:
        if obj.get("alpha") != AUTO:
            problems.append('ordering.cpu: only with alpha "auto"')
        elif obj["cpu"] not in CPU_SIGNALS:
            problems.append(f"ordering.cpu: must be one of {', '.join(CPU_SIGNALS)}, got {obj['cpu']!r}")
    if "max_snapshot_bytes" in obj:
        cap = obj["max_snapshot_bytes"]
        if not (isinstance(cap, int) and not isinstance(cap, bool) and cap >= 0):
            problems.append(f"ordering.max_snapshot_bytes: must be an integer >= 0, got {cap!r}")
    return problems


@dataclass
class AlphaController:
    """Run-time adaptation of alpha to the CPU that is free (seed 002 §4.4, Algorithm 3).

    Every ``span`` the caller reports the busy factor ``b`` (the share of the span the
    component spent working). Below ``low`` there is headroom: alpha halves (more
    speculation), or, once halving would cross half the way from the last critical
    alpha to 1, steps down by ``step``. Above ``high`` speculation costs more than the
    CPU has: the current alpha is remembered and alpha goes back to 1 (buffering).
    """

    low: float = 0.8
    high: float = 0.9
    step: float = 0.05
    alpha: float = 1.0
    last_minimum: float = 1.0  # no critical alpha known yet: halve freely
    slow: bool = False
    resets: int = 0

    def update(self, busy: float) -> float:
        if busy > self.high:
            self.last_minimum, self.alpha, self.slow = self.alpha, 1.0, False
            self.resets += 1
        elif busy < self.low:
            if self.slow:
                target = self.alpha - self.step
            else:
                target = self.alpha / 2
                if (1 - self.last_minimum) / 2 > target:
                    self.slow = True
                    target = self.alpha - self.step
            self.alpha = max(0.0, target)
        return self.alpha


class SpeculationTarget(Protocol):
    """What the unit drives: the component behind it (its state, as opaque bytes)."""

    def snapshot(self) -> bytes: ...

    def restore(self, snapshot: bytes) -> None: ...

    def process(self, events: list[dict]) -> None: ...


class _SettlingUnit(OrderingUnit):
    """The buffering unit inside: settles strictly below ``clk - K`` in both clock modes."""

    def __init__(self, settings: OrderingSettings, streams: Sequence[str]) -> None:
        super().__init__(settings, streams)
        self._tie = 1

    @property
    def settled_key(self) -> tuple[float, int]:
        """(ts, stream position) of the last event settled in order."""
        return self._rel_key

    def progress_of(self, pos: int) -> int | None:
        """How far stream ``pos`` has come in this unit: its largest ts or promise."""
        return self._prog[pos]

    def clock_with(self, seen: Sequence[int | None]) -> int | None:
        """clk as it would be if each stream had also come as far as ``seen`` (raw, unsettled input).

        Watermark mode: the slowest running stream; max mode: the furthest clock stream. Never below clk.
        """
        progress = [p if s is None or (p is not None and p >= s) else s for p, s in zip(self._prog, seen, strict=True)]
        if self._watermark:
            running = [p for p, e in zip(progress, self._ended, strict=True) if not e]
            if not running or None in running:
                return self._clk
            clk = min(running)  # type: ignore[type-var]
        else:
            ahead = [p for p, c in zip(progress, self._is_clock, strict=True) if c and p is not None]
            if not ahead:
                return self._clk
            clk = max(ahead)
        return clk if self._clk is None or clk > self._clk else self._clk


class SpeculativeUnit:
    """A buffering unit plus premature emission, snapshots and replay (seed 002, Algorithms 1-2).

    The buffer holds every event that is not settled yet, sorted by (ts, stream
    position, arrival), the buffering unit's order. ``self._aep`` counts the
    emitted entries at its front. The events emitted by one call go to the component
    in one batch, with one snapshot of its state before the batch (the first entry's;
    the others are ``_SAME``): a state copy per event costs as much as the work itself
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
        if len(streams) >= 1 << _POS_BITS:
            raise ValueError(f"a speculative unit takes fewer than {1 << _POS_BITS} inputs, got {len(streams)}")
        self.inner = _SettlingUnit(settings, streams)
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
        self._keys: list[int] = []  # ``_key``s, sorted
        self._events: list[dict] = []
        self._snaps: list[Any] = []  # bytes, _SAME or None, per emitted entry: the state before its batch (None: final)
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

    def reads_raw(self, stream: str) -> bool:
        return self._raw[self._pos[stream]]

    def settled_index(self, stream: str) -> int | None:
        """The newest index of a raw input its producer has settled, as last told (None: every tuple is final)."""
        return self._upstream_settled[self._pos[stream]]

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
    def oldest_snapshot(self) -> bytes | None:
        """The snapshot a replay could go back to furthest (None: nothing emitted is unsettled)."""
        return next((snap for snap in self._snaps if snap is not None and snap is not _SAME), None)

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
            start = bisect_right(self._keys, _last_key(max(known), pos)) if known else 0
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

    def _insert(self, pos: int, events: Sequence[dict]) -> None:
        """Sort a batch into the buffer; one landing in front of the AEP makes the unit restore and replay."""
        rts, rpos = self.inner.settled_key
        fresh: list[tuple[int, dict]] = []
        for ev in events:
            ts = ev["ts"]
            self._seq += 1
            if ts < rts or (ts == rts and pos < rpos):
                continue  # behind what is settled: late, reported by the inner unit
            fresh.append((_key(ts, pos, self._seq), ev))
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
        while start > 0 and self._snaps[start] is _SAME:
            start -= 1
        snap = self._snaps[start]
        if snap is None or snap is _SAME:  # pragma: no cover - every emitted, unsettled batch has one
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
        if n < len(self._snaps) and self._snaps[n] is _SAME:
            start = n
            while start > 0 and self._snaps[start] is _SAME:
                start -= 1
            snap = self._snaps[start]
            assert snap is not None and snap is not _SAME
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
            self._rewind(stray[0], _pos(self._keys[stray[0]]))
        for n in reversed(stray):
            del self._keys[n], self._events[n]

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

    def _note_raw(self, pos: int) -> None:
        """A raw input's unsettled events or raw watermark changed: how far its raw view has come."""
        top, promised = self._unsettled_max[pos], self._raw_promised[pos]
        seen = top if promised is None or (top is not None and top >= promised) else promised
        self._raw_seen_count += (seen is not None) - (self._raw_seen[pos] is not None)
        self._raw_seen[pos] = seen

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
            limit = min(limit, _ts(self._keys[self._aep]) - 1)
        if limit == -math.inf or (settled is not None and limit <= settled):
            return settled
        return int(limit)

    def _emit(self, everything: bool) -> None:
        n = len(self._keys)
        if self._aep >= n:
            return
        limit = math.inf if everything else self._emit_limit()
        if _ts(self._keys[self._aep]) > limit:
            return
        stop = n if limit == math.inf else bisect_right(self._keys, _last_key(int(limit)))
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
        self._snaps.extend([_SAME] * (count - 1))
        self.premature += count
        self.target.process(self._events[self._aep : stop])
        self._aep = stop

    def _take_snapshot(self) -> bytes:
        snap = self.target.snapshot()
        self.snapshots_taken += 1
        prev = next((s for s in reversed(self._snaps) if s is not _SAME), None)
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
        if snap is None or snap is _SAME:
            return
        entry = self._held[id(snap)]
        entry[1] -= 1
        if not entry[1]:
            del self._held[id(snap)]
            self.snapshot_bytes -= len(snap)

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
    "AUTO",
    "CPU_SIGNALS",
    "INPUT_VIEWS",
    "MODES",
    "ORDERING_OBJECT_KEYS",
    "SpeculationSettings",
    "SpeculationTarget",
    "SpeculativeUnit",
    "validate_ordering_object",
]
