"""Components: the code a worker runs between its input and output buffers.

A component type is a class registered under the name workflow files use.
The worker builds it from the worker spec, hands it a context with its
input and output streams, and runs it as one owned task. Types are found by
name in ``pan.components.catalog``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from pan.buffers.streams import OutputStream
from pan.input.channel import InputChannel
from pan.wire.progress import StreamProgress

if TYPE_CHECKING:
    from pan.config.specs import WorkerSpec


@dataclass
class ComponentContext:
    """Everything a component may touch: its spec, inputs and outputs."""

    spec: WorkerSpec
    inputs: dict[str, InputChannel]
    outputs: dict[str, OutputStream]
    log: logging.Logger


class Component:
    """Base class. Subclasses set ``type_name`` and implement ``run``."""

    type_name: ClassVar[str] = ""
    #: Publish outputs as a repeater (``rep=true``) at ``repeater_level(spec)``.
    repeats: ClassVar[bool] = False

    def __init__(self, ctx: ComponentContext) -> None:
        self.ctx = ctx
        self.params: dict[str, Any] = ctx.spec.params

    # --- static description, used by validation and by the worker ---------------

    @classmethod
    def check_params(cls, spec: WorkerSpec) -> list[str]:
        """Problems with ``spec.params`` as "key: message" strings; empty when valid."""
        return []

    @classmethod
    def input_names(cls, spec: WorkerSpec) -> list[str]:
        """Intra-PAN streams to subscribe to."""
        return list(spec.inputs)

    @classmethod
    def output_names(cls, spec: WorkerSpec) -> list[str]:
        """Streams this component publishes."""
        return []

    @classmethod
    def make_output(cls, spec: WorkerSpec, name: str, progress: StreamProgress) -> OutputStream:
        """The output stream ``name``, buffered as the spec says (a component may hold its tuples otherwise)."""
        return OutputStream(name, spec.buffer_size, progress, spec.buffer_bytes)

    @classmethod
    def repeater_level(cls, spec: WorkerSpec) -> int:
        return 0

    @classmethod
    def reads_raw(cls, spec: WorkerSpec) -> bool:
        """Its inputs are pulled in the raw view (``/data?view=raw``): a speculative producer's unsettled tuples
        and its retractions too. The default, the settled view, shows only tuples no retraction can touch."""
        return False

    @classmethod
    def listen_ports(cls, spec: WorkerSpec) -> dict[str, int]:
        """Ports it listens on besides the worker's HTTP ``port``, by the key that sets them (checked for clashes)."""
        return {}

    # --- lifecycle -------------------------------------------------------------

    async def start(self) -> None:
        """Acquire resources (listening sockets...) before the worker publishes."""

    async def run(self) -> None:
        """The component's main loop; cancelled when the worker stops."""

    async def stop(self) -> None:
        """Release what ``start`` acquired."""

    def counters(self) -> dict[str, Any]:
        """Component-specific numbers for `/streams` and `/metrics`."""
        return {}
