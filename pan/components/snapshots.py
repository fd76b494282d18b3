"""Snapshots of a component's state for speculative ordering units (pan/ordering/speculation.py).

The middleware takes and restores them, never the component: a component names
the attributes that hold its state (``OrderedComponent.state_attributes``), and a
snapshot is a deep copy of them as bytes (pickle), so dicts, lists, objects and
numpy arrays inside are copied however deeply they nest. Live objects the state
refers to (output streams, input channels, loggers, the ordering unit) are not
state: they are kept by reference, so a restored state writes to the same streams.
Next to the state a snapshot records where each output stream stood, so a
restore makes the outputs hold what the component appended since, until the replay shows
which of it changed (``OutputStream.replay_from``).
"""

from __future__ import annotations

import asyncio
import copyreg
import io
import logging
import pickle
from typing import Any, Protocol

import orjson

from pan.buffers.streams import OutputStream
from pan.input.channel import Cursor, InputChannel


class Snapshottable(Protocol):
    """What a component offers its snapshots (``OrderedComponent`` does): its state, and processing events."""

    def snapshot_state(self) -> Any: ...

    def restore_state(self, state: Any) -> None: ...

    def process(self, events: list[dict]) -> None: ...

#: Objects shared, never copied, when they occur inside a component's state.
LIVE_TYPES: tuple[type, ...] = (OutputStream, InputChannel, Cursor, logging.Logger, asyncio.Event)


#: Live objects of every codec, by codec and object id: what a pickled reference is resolved against.
_LIVE: dict[int, dict[int, object]] = {}


def _live_object(codec: int, obj: int) -> object:
    return _LIVE[codec][obj]


class StateCodec:
    """Deep copies as bytes; objects of ``LIVE_TYPES`` travel by reference.

    Live objects are found through the pickler's ``dispatch_table``, so only they cost a
    Python call; everything else is copied by pickle's C code.
    """

    def __init__(self) -> None:
        self._live: dict[int, object] = {}
        _LIVE[id(self)] = self._live
        self._table = copyreg.dispatch_table.copy()
        for live_type in LIVE_TYPES:
            self._table[live_type] = self._reduce_live

    def __del__(self) -> None:
        _LIVE.pop(id(self), None)

    def _reduce_live(self, obj: object) -> tuple[Any, tuple[int, int]]:
        self._live[id(obj)] = obj
        return _live_object, (id(self), id(obj))

    def dump(self, state: Any) -> bytes:
        buffer = io.BytesIO()
        pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
        pickler.dispatch_table = self._table
        pickler.dump(state)
        return buffer.getvalue()

    def load(self, data: bytes) -> Any:
        return pickle.loads(data)


class ComponentSnapshots:
    """The speculative unit's target for one component: its state, its outputs' positions, its ``process``."""

    def __init__(self, component: Snapshottable, outputs: dict[str, OutputStream]) -> None:
        self.component = component
        self.outputs = outputs  # the streams a replay rewinds (not the late-events stream: it is never premature)
        self.codec = StateCodec()
        self.rewound_tuples = 0
        self._replaying = False  # a restore made the outputs hold tuples until ``end_replays``
        #: The oldest snapshot ``settle`` was last given and its outputs' positions: the unit asks after every
        #: call, and the oldest snapshot changes far less often.
        self._oldest: bytes | None = None
        self._oldest_positions: dict[str, int] = {}
        for out in outputs.values():
            out.settle(-1)  # nothing is final before the unit says so: raw readers must not take it as final

    def snapshot(self) -> bytes:
        """The outputs' positions as a JSON line (read without unpickling, ``settle``), then the state."""
        positions = {name: out.next_index for name, out in self.outputs.items()}
        return orjson.dumps(positions) + b"\n" + self.codec.dump(self.component.snapshot_state())

    @staticmethod
    def positions(snapshot: bytes) -> dict[str, int]:
        return orjson.loads(snapshot[: snapshot.index(b"\n")])

    def restore(self, snapshot: bytes) -> None:
        header = snapshot.index(b"\n")
        positions = orjson.loads(snapshot[:header])
        self.component.restore_state(self.codec.load(snapshot[header + 1 :]))
        for name, position in positions.items():
            # On-demand retraction: the tuples after the snapshot are held, not withdrawn; the replay keeps
            # those it emits again unchanged, and only a change (or a tuple not emitted again) withdraws them.
            self.outputs[name].replay_from(position - 1)
        self._replaying = True

    def process(self, events: list[dict]) -> None:
        self.component.process(events)

    def end_replays(self) -> None:
        """The unit's call is over: withdraw what a replay held and did not emit again (``OutputStream.end_replay``)."""
        if not self._replaying:
            return
        self._replaying = False
        for out in self.outputs.values():
            before = out.retracted_tuples
            out.end_replay()
            self.rewound_tuples += out.retracted_tuples - before

    def settle(self, oldest: bytes | None) -> None:
        """Mark what no replay can withdraw: each output's tuples before the oldest snapshot's position."""
        self.end_replays()
        if oldest is not self._oldest:
            self._oldest = oldest
            self._oldest_positions = self.positions(oldest) if oldest is not None else {}
        positions = self._oldest_positions
        for name, out in self.outputs.items():
            out.settle(positions.get(name, out.next_index) - 1)
