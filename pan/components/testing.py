"""Run one component offline, without servers: for testing a component's logic.

``build_component`` makes a component of a registered type with real input
and output streams, validated as a workflow would validate its worker. An
``OrderedComponent`` is then fed with ``feed(input, tuples)`` (tuples of one
input in its order, across calls and inputs in any interleaving the test
wants) and ended with ``finish()``, which ends every input as its producer's
end promise would; ``output_tuples`` reads what an output holds::

    component = build_component("pauses", {"min_gap_ps": 10**12}, inputs=["A", "B"])
    component.feed("A", [{"ts": 0}, {"ts": 3 * 10**12}])
    component.finish()
    assert output_tuples(component, "PAUSES") == [{"i": 0, "ts": ..., ...}]

A component's behaviour over HTTP (pulls, progress, restarts) needs real
workers instead; this module only covers what happens between its buffers.
It needs nothing beyond PAN's own dependencies (no test framework).
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from pan.buffers.ringbuffer import RingBuffer
from pan.buffers.streams import OutputStream
from pan.components.base import Component, ComponentContext
from pan.components.catalog import get_component_type
from pan.config.specs import WorkerSpec, WorkflowError
from pan.input.channel import InputChannel
from pan.wire.progress import StreamProgress

__all__ = ["OutputReader", "build_component", "in_input_order", "output_tuples"]


def build_component(
    type_name: str,
    params: dict[str, Any] | None = None,
    inputs: list[str] | None = None,
    buffer_size: int = 1_000_000,
    ordering: dict[str, Any] | None = None,
) -> Component:
    """A component of type ``type_name`` with these ``params`` and ``inputs``, every stream in memory.

    Raises ``ValueError`` for an unknown type and ``WorkflowError`` for parameters its
    ``check_params`` rejects, as loading a workflow would. Each output holds the last
    ``buffer_size`` tuples. ``ordering`` is the worker's ``ordering`` object (e.g. a speculative unit).
    """
    component_type = get_component_type(type_name)
    if component_type is None:
        raise ValueError(f"unknown component type {type_name!r}")
    spec = WorkerSpec(
        name=f"test-{type_name}", type=type_name, host="127.0.0.1", port=1, peer="p",
        inputs=list(inputs or []), buffer_size=buffer_size, params=dict(params or {}), ordering=ordering,
    )
    problems = component_type.check_params(spec)
    check_ordering = getattr(component_type, "check_ordering", None)
    if ordering is not None and check_ordering is not None:
        problems += check_ordering(spec)
    if problems:
        raise WorkflowError(problems, spec.name)
    ctx = ComponentContext(
        spec=spec,
        inputs={n: InputChannel(n, RingBuffer(buffer_size)) for n in component_type.input_names(spec)},
        outputs={
            n: OutputStream(n, buffer_size, StreamProgress(epoch="test")) for n in component_type.output_names(spec)
        },
        log=logging.getLogger(spec.name),
    )
    return component_type(ctx)


def output_tuples(component: Component, stream: str) -> list[dict[str, Any]]:
    """Every tuple the output ``stream`` still holds, oldest first, as a subscriber gets it (with its index ``i``)."""
    buffer = component.ctx.outputs[stream].buffer
    return [orjson.loads(item) for item in buffer.read(-1, oldest=buffer.capacity).items]


class OutputReader:
    """The tuples one output gained since the last call: for chaining components offline, each fed the
    outputs of the one before, piece by piece. It holds the output as a lossless reader (as `pan replay`'s
    recorder does), so a burst larger than ``buffer_size`` between two calls is kept for it, not overwritten."""

    def __init__(self, component: Component, stream: str) -> None:
        self.output = component.ctx.outputs[stream]
        self.after = -1
        self.missed = 0  # tuples lost before they were read (holes an upstream gap left)
        self.name = f"OutputReader-{id(self)}"
        self.output.hold(self.name, self.after)

    def new(self) -> list[dict[str, Any]]:
        buffer = self.output.buffer
        page = buffer.read(self.after, oldest=buffer.capacity)
        self.missed += page.missed
        if page.items:
            self.after = page.indices[-1]
        self.output.hold(self.name, self.after)  # every call renews the hold: a quiet output must not drop it
        return [orjson.loads(item) for item in page.items]


def in_input_order(*streams: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tuples of several inputs in (ts, input position) order, as an ordering unit with nothing late releases
    them; ``streams`` are given in input position order (the sort is stable)."""
    merged = [ev for s in streams for ev in s]
    merged.sort(key=lambda ev: ev["ts"])
    return merged
