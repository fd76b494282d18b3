"""A worker's checkpoints: where they are kept, and what a worker that starts with one does first.

A peer run with a state directory (``pan run --state-dir``) gives each of
its stateful workers (ordered components) a folder of checkpoints there. A
worker that finds one restores it before it serves anything: the component's
state and ordering unit, its outputs' indices under the old epoch (so a
subscriber reads on without a reset), and each input's position, from which
its pull starts again. A checkpoint that cannot be used stops the worker with
one line, unless the peer was told to start fresh (``--fresh-start``), which
it then says.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from pan.buffers.streams import OutputStream
from pan.components import checkpoints
from pan.components.base import Component
from pan.components.ordered import OrderedComponent
from pan.config.specs import WorkerSpec
from pan.input.channel import InputChannel
from pan.ordering.picoseconds import PS_PER_S
from pan.state.checkpoint_files import CheckpointError, CheckpointFiles, Owner

__all__ = ["CheckpointError", "Resumed", "StateOptions", "resume"]


@dataclass(frozen=True)
class StateOptions:
    """A peer's state directory, the workflow's checkpoint period and what to do with a bad checkpoint."""

    folder: Path
    workflow: str
    every_s: float | None
    fresh_start: bool = False


@dataclass
class Resumed:
    """What a worker restored: its outputs' epoch, and where each input's pull goes on from."""

    epoch: str | None = None
    inputs: dict[str, tuple[int, str | None]] = field(default_factory=dict)  # input -> (after index, epoch)


def resume(component: Component, spec: WorkerSpec, inputs: dict[str, InputChannel],
           outputs: dict[str, OutputStream], options: StateOptions, log: logging.Logger) -> Resumed:
    """Restore the newest checkpoint of a stateful worker, if there is one, and have it take checkpoints from now
    on; a stateless worker (a forwarder, a repeater) keeps no state. Raises ``CheckpointError`` for a checkpoint
    that cannot be used, unless ``options.fresh_start``."""
    if not isinstance(component, OrderedComponent) or component.snapshots is not None:
        return Resumed()
    files = CheckpointFiles(options.folder, Owner(options.workflow, spec.name, spec.type))
    resumed, after_ts = Resumed(), None
    try:
        checkpoint = files.latest()
        if checkpoint is not None:
            try:
                resume_at = checkpoints.restore(component, checkpoint.payload)
            except ValueError as exc:
                raise CheckpointError(f"checkpoint {checkpoint.path}: {exc}") from None
            for name, (index, progress) in resume_at.outputs.items():
                outputs[name].reset(progress, start_index=index)
                resumed.epoch = progress.epoch
            for name, (position, _epoch) in resume_at.inputs.items():
                inputs[name].resume_after(position)
            resumed.inputs = resume_at.inputs
            after_ts = resume_at.event_ts
            log.info("restored the checkpoint %s (event time %s ps)", checkpoint.path.name, checkpoint.event_ts)
    except CheckpointError as exc:
        if not options.fresh_start:
            raise
        log.warning("%s; starting fresh (--fresh-start)", exc)
    if options.every_s is not None:
        component.keep_checkpoints(files, round(options.every_s * PS_PER_S), after_ts)
    return resumed
