"""Build one component with real input/output streams, without servers.

For component logic tests: feed tuples, call ``finish()``, read the outputs.
Integration tests over HTTP use real workers instead (see conftest.py).
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from pan.catalog import get_component_type
from pan.channel import InputChannel
from pan.component import Component, ComponentContext
from pan.progress import StreamProgress
from pan.ringbuffer import RingBuffer
from pan.specs import WorkerSpec, WorkflowError
from pan.streams import OutputStream


def build_component(
    type_name: str, params: dict[str, Any] | None = None, inputs: list[str] | None = None, buffer_size: int = 1_000_000
) -> Component:
    component_type = get_component_type(type_name)
    assert component_type is not None, type_name
    spec = WorkerSpec(
        name=f"test-{type_name}", type=type_name, host="127.0.0.1", port=1, peer="p",
        inputs=list(inputs or []), buffer_size=buffer_size, params=dict(params or {}),
    )
    problems = component_type.check_params(spec)
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
    buffer = component.ctx.outputs[stream].buffer
    return [orjson.loads(item) for item in buffer.read(-1, oldest=buffer.capacity).items]
