"""Every stateful worker of the full-game workflow can be checkpointed and restored as it starts (its state pickles,
its unit comes back, and a restored one checkpoints again). With data in them: tests/pan/state."""

from __future__ import annotations

from pathlib import Path

import pytest

from pan.components import checkpoints
from pan.components.ordered import OrderedComponent
from pan.components.testing import build_component
from pan.workflow.parser import load_workflow

WORKFLOW = Path(__file__).resolve().parents[2] / "workflows" / "full_game_3_peers.json"
SPECS = [spec for spec in load_workflow(WORKFLOW).workers if spec.type not in ("forwarder", "repeater")]


@pytest.mark.parametrize("spec", SPECS, ids=[spec.name for spec in SPECS])
async def test_a_full_game_worker_round_trips_through_a_checkpoint(spec) -> None:  # type: ignore[no-untyped-def]
    def make() -> OrderedComponent:
        component = build_component(spec.type, spec.params, inputs=spec.inputs or None)
        assert isinstance(component, OrderedComponent)
        return component

    taken = make()
    await taken.start()
    payload = checkpoints.take(taken)
    restored = make()
    resume = checkpoints.restore(restored, payload)
    assert set(resume.inputs) == set(taken.ctx.inputs) and set(resume.outputs) == set(taken.ctx.outputs)
    assert restored.unit.streams == taken.unit.streams and restored.unit.metrics() == taken.unit.metrics()
    for name in type(taken).state_attributes or ():
        assert type(getattr(restored, name)) is type(getattr(taken, name)), name
    for name, (position, _epoch) in resume.inputs.items():
        restored.ctx.inputs[name].resume_after(position)
    await restored.start()
    checkpoints.restore(make(), checkpoints.take(restored))  # and a restored one checkpoints again
