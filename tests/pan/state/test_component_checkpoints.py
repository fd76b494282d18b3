"""A component restored from a checkpoint goes on exactly as if it had never stopped: same tuples, same indices."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest

from pan.components import checkpoints
from pan.components.catalog import register
from pan.components.ordered import OrderedComponent
from pan.components.testing import build_component
from pan.config.specs import WorkerSpec
from pan.state.checkpoint_files import CheckpointFiles, Owner
from pan.wire.progress import END_OF_STREAM, StreamProgress
from tests.conftest import wait_until

PS = 10**12
OWNER = Owner("test", "counter", "test_counter")


@register
class Counter(OrderedComponent):
    """Test-only stateful detector: each event with the running count of its key, and the sum of its values."""

    type_name = "test_counter"
    own_params: ClassVar[tuple[str, ...]] = ()
    state_attributes = ("counts", "total")

    @classmethod
    def main_outputs(cls, spec: WorkerSpec) -> list[str]:
        return ["COUNTS"]

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self.counts: dict[str, int] = {}
        self.total = 0

    def process(self, events: list[dict[str, Any]]) -> None:
        out = []
        for event in events:
            self.counts[event["k"]] = self.counts.get(event["k"], 0) + 1
            self.total += event["v"]
            out.append({"ts": event["ts"], "k": event["k"], "n": self.counts[event["k"]], "total": self.total})
        self.ctx.outputs["COUNTS"].extend(out)


def events(stream: str, count: int) -> list[dict[str, Any]]:
    step = 7 if stream == "A" else 11  # two inputs at different rates, interleaved in event time
    return [{"i": i, "ts": step * i * PS // 100, "k": f"{stream}{i % 3}", "v": i} for i in range(count)]


def encoded(component: OrderedComponent, after: int = -1) -> list[bytes]:
    buffer = component.ctx.outputs["COUNTS"].buffer
    return buffer.read(after, oldest=buffer.capacity).items


def make() -> OrderedComponent:
    component = build_component("test_counter", {"clock_mode": "watermark"}, inputs=["A", "B"])
    assert isinstance(component, OrderedComponent)
    return component


async def run_until(component: OrderedComponent, feed: dict[str, list[dict[str, Any]]], end: bool,
                    done: Any) -> None:
    """Run ``component``'s loop while its inputs get ``feed`` (and their end, if ``end``), until ``done()``."""
    await component.start()
    running = asyncio.create_task(component.run())
    try:
        for start in range(0, max(map(len, feed.values()), default=0), 100):  # in pieces, each read before the next
            for name, tuples in feed.items():
                if piece := tuples[start:start + 100]:
                    component.ctx.inputs[name].add(piece)
                    await wait_until(lambda n=name, last=piece[-1]["i"]: component.cursors[n].position == last)
        if end:
            for channel in component.ctx.inputs.values():
                channel.set_progress(StreamProgress(wm=END_OF_STREAM))
        await wait_until(done, timeout_s=60)
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running


async def test_a_restored_component_produces_the_same_tuples_with_the_same_indices(tmp_path: Path) -> None:
    a, b = events("A", 3000), events("B", 2000)
    undisturbed = make()
    await run_until(undisturbed, {"A": a, "B": b}, True, lambda: len(encoded(undisturbed)) == 5000)

    first = make()
    files = CheckpointFiles(tmp_path, OWNER, keep=2)
    first.keep_checkpoints(files, every_ps=10 * PS)
    await run_until(first, {"A": a[:1800], "B": b[:900]}, False, lambda: files.written >= 3)
    checkpoint = files.latest()  # the process dies here: what it did after the checkpoint is lost
    assert checkpoint is not None and len(files.files()) == 2

    second = make()
    resume = checkpoints.restore(second, checkpoint.payload)
    assert resume.event_ts == checkpoint.event_ts
    for name, (position, _epoch) in resume.inputs.items():
        second.ctx.inputs[name].resume_after(position)
    for name, (index, progress) in resume.outputs.items():
        second.ctx.outputs[name].reset(progress, start_index=index)
    next_index = resume.outputs["COUNTS"][0]
    assert 0 < next_index < 5000
    rest = {name: tuples[position + 1:] for (name, tuples), (position, _) in
            zip({"A": a, "B": b}.items(), resume.inputs.values(), strict=True)}
    await run_until(second, rest, True, lambda: second.ctx.outputs["COUNTS"].next_index == 5000)
    assert encoded(second, next_index - 1) == encoded(undisturbed, next_index - 1)  # byte for byte, index for index
    assert encoded(first)[:next_index] == encoded(undisturbed)[:next_index]
    assert orjson.loads(encoded(second)[-1])["total"] == sum(range(3000)) + sum(range(2000))


async def test_a_checkpoint_of_another_component_is_refused_whole(tmp_path: Path) -> None:
    first = make()
    await run_until(first, {"A": events("A", 50)}, False, lambda: True)
    payload = checkpoints.take(first)
    other = build_component("merge", {"output": "COUNTS", "clock_mode": "watermark"}, inputs=["A"])
    assert isinstance(other, OrderedComponent)
    with pytest.raises(ValueError, match="not this worker's"):
        checkpoints.restore(other, payload)
    with pytest.raises(ValueError, match="does not fit this worker"):
        checkpoints.restore(make(), payload[: len(payload) // 2])
    fresh = make()
    assert fresh.counts == {} and fresh.unit.pushed_count == 0  # nothing of a refused checkpoint is loaded
