"""What a checkpoint of an ordered component holds, and how it is taken and put back.

A checkpoint is everything needed to carry on as if the process had never
stopped, at a moment between two rounds of the run loop, when nothing is half
done:

* the component's state (its declared ``state_attributes``, as the speculative
  units snapshot it, pan/components/snapshots.py);
* the ordering unit (the events it holds, K and its window, clk, promises),
  and the row store of a component that takes columns;
* per input, the index of the last tuple fed to the unit and the producer's
  epoch: a restored worker pulls again from there;
* per output, the index the next tuple gets and the output's progress
  (epoch and watermark): the tuples it produces again carry the same indices.

It is a pickle. The live objects inside the state (output streams, input
channels, the logger) are written as their names and resolved
against the new process's objects when it is loaded.
"""

from __future__ import annotations

import io
import logging
import pickle
from dataclasses import dataclass
from typing import Any, Protocol

from pan.buffers.row_store import RowStore
from pan.buffers.streams import OutputStream
from pan.components.base import ComponentContext
from pan.input.channel import Cursor, InputChannel
from pan.wire.progress import StreamProgress


class OrderedComponent(Protocol):
    """What a checkpoint is taken of (``pan.components.ordered.OrderedComponent``)."""

    ctx: ComponentContext
    unit: Any  # an OrderingUnit
    row_store: RowStore | None

    @property
    def cursors(self) -> dict[str, Cursor]: ...

    def snapshot_state(self) -> Any: ...

    def restore_state(self, state: Any) -> None: ...

#: The ordered component's own attributes that are state too (counters and what its loss reports need).
BASE_ATTRIBUTES = ("untimed_tuples", "input_missed", "_input_ts", "loss_reports", "held_back_rounds")


@dataclass(frozen=True)
class Resume:
    """Where a restored component's inputs and outputs go on from."""

    inputs: dict[str, tuple[int, str | None]]  # input -> (last index fed to the unit, producer's epoch)
    outputs: dict[str, tuple[int, StreamProgress]]  # output -> (next index, progress)
    event_ts: int | None  # the unit's release point when it was taken


class _Pickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, component: OrderedComponent) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._names = {id(obj): key for key, obj in _live_objects(component).items()}

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, OutputStream | InputChannel | logging.Logger):
            key = self._names.get(id(obj))
            if key is None:
                raise pickle.PicklingError(f"a live object that is not the component's own: {obj!r:.80}")
            return key
        return None


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, component: OrderedComponent) -> None:
        super().__init__(file)
        self._objects = _live_objects(component)

    def persistent_load(self, key: Any) -> Any:
        try:
            return self._objects[tuple(key)]
        except KeyError:
            raise pickle.UnpicklingError(f"the checkpoint names {key!r}, which this worker does not have") from None


def _live_objects(component: OrderedComponent) -> dict[tuple[str, ...], Any]:
    ctx = component.ctx
    objects: dict[tuple[str, ...], Any] = {("log",): ctx.log}
    objects.update({("output", name): stream for name, stream in ctx.outputs.items()})
    objects.update({("input", name): channel for name, channel in ctx.inputs.items()})
    return objects


def take(component: OrderedComponent) -> bytes:
    """The component's checkpoint now (between two rounds of its run loop)."""
    record = {
        "state": component.snapshot_state(),
        "base": {name: getattr(component, name) for name in BASE_ATTRIBUTES},
        "unit": component.unit,
        "row_store": component.row_store,
        "inputs": {name: (cursor.position, component.ctx.inputs[name].progress.epoch)
                   for name, cursor in component.cursors.items()},
        "outputs": {name: (stream.next_index, stream.progress.to_json())
                    for name, stream in component.ctx.outputs.items()},
        "event_ts": component.unit.release_limit,
    }
    buffer = io.BytesIO()
    _Pickler(buffer, component).dump(record)
    return buffer.getvalue()


def restore(component: OrderedComponent, payload: bytes) -> Resume:
    """Put a checkpoint back into a component that has not started; says where inputs and outputs go on.
    Raises ``ValueError`` (in one line) if it does not fit the component: nothing is changed then."""
    try:
        record = _Unpickler(io.BytesIO(payload), component).load()
        inputs, outputs = dict(record["inputs"]), dict(record["outputs"])
        state, base, unit, row_store = record["state"], record["base"], record["unit"], record["row_store"]
    except (pickle.UnpicklingError, EOFError, KeyError, TypeError, AttributeError, ImportError) as exc:
        raise ValueError(f"the checkpoint does not fit this worker ({exc})") from None
    if set(inputs) != set(component.ctx.inputs) or set(outputs) != set(component.ctx.outputs):
        raise ValueError(f"the checkpoint's inputs and outputs ({sorted(inputs)}, {sorted(outputs)}) are not this "
                         "worker's: was the workflow changed?")
    if type(unit) is not type(component.unit) or tuple(unit.streams) != tuple(component.unit.streams):
        raise ValueError("the checkpoint's ordering unit is not this worker's: was the workflow changed?")
    component.restore_state(state)
    for name, value in base.items():
        setattr(component, name, value)
    component.unit = unit
    if row_store is not None:
        component.row_store = row_store
        for channel in component.ctx.inputs.values():
            channel.row_store = row_store
    return Resume(
        inputs={name: (int(position), epoch) for name, (position, epoch) in inputs.items()},
        outputs={name: (int(index), StreamProgress.from_json(progress)) for name, (index, progress) in outputs.items()},
        event_ts=record.get("event_ts"),
    )
