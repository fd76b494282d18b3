"""Retraction across two speculative levels, on real workers (seed 002 §4.3.2, on-demand retraction).

Level 1 is a speculative filter of two sensors (it drops rows marked with x = 999), level 2 a speculative
merge of level 1's output, read raw, and a third sensor; level 1's raw watermark (``raw_wm``) lets level 2
speculate past level 1's newest tuple. Both run in watermark mode with K held at 1 s,
so nothing settles before the end and every event is emitted at once (alpha 0). Once both levels have
emitted what they can, one row of the first sensor comes out of order:

* kept by the filter, it changes level 1's output: level 1 replays once and withdraws its tuples from
  the changed one on; level 2 gets one retraction and replays exactly once, though the replacement
  (A33) comes before a row of the third sensor (C34) it had already emitted;
* dropped by the filter, it leaves level 1's output as it was: level 1 replays, emits the same tuples
  again and withdraws nothing, so level 2 neither hears of it nor replays.

After the end, the outputs of both levels equal those of the same workflow with buffering units.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, ClassVar

import aiohttp
import orjson
import pytest

from pan.components.catalog import register
from pan.components.ordered import OrderedComponent
from pan.config.specs import WorkerSpec
from pan.ingest.lines import END_OF_STREAM, promise_line
from pan.repository.server import RepositoryServer
from pan.worker.worker import Worker
from pan.workflow.parser import parse_workflow
from tests.conftest import HOST, WorkerGroup, forwarder, free_port, sensor_row, wait_until, workflow_dict

PS_PER_MS = 10**9
T0 = 10**15
K_PS = 1000 * PS_PER_MS  # K floor: far above the disorder, so nothing settles before the end
A, B, C = 4, 13, 14  # sensors: level 1 filters A and B, level 2 merges its output with C
A_MS = [10, 20, 30, 40, 50]
B_MS = [15, 25, 35, 45, 55]
C_MS = [12, 22, 32, 34, 42, 52, 62]  # C34: between the late row and the first of X it displaces
LATE_MS = 33  # a row of A after A50: in front of what both levels emitted, within K (not late)
DROPPED_X = 999  # the filter drops rows with this x (sensor_row's k = -1)


@register
class DropMarked(OrderedComponent):
    """Test-only filter: the inputs in ts order, without rows whose x is 999 (stateless)."""

    type_name = "test_drop_marked"
    own_params: ClassVar[tuple[str, ...]] = ("output",)
    state_attributes: ClassVar[tuple[str, ...] | None] = ()

    @classmethod
    def main_outputs(cls, spec: WorkerSpec) -> list[str]:
        return [spec.params["output"]]

    def process(self, events: list[dict[str, Any]]) -> None:
        self.ctx.outputs[self.params["output"]].extend([e for e in events if e.get("x") != DROPPED_X])


def two_levels(repository_port: int, speculative: bool) -> dict[str, Any]:
    ordering = {"ordering": {"mode": "speculative", "alpha": 0}} if speculative else {}
    params = {"clock_mode": "watermark", "min_k": K_PS}
    return workflow_dict(repository_port, [
        forwarder("F", [f"SENSOR{A}", f"SENSOR{B}", f"SENSOR{C}"]),
        {"name": "L1", "type": "test_drop_marked", "host": HOST, "port": free_port(),
         "inputs": [f"SENSOR{A}", f"SENSOR{B}"], "params": {"output": "X", **params}, **ordering},
        {"name": "L2", "type": "merge", "host": HOST, "port": free_port(), "inputs": ["X", f"SENSOR{C}"],
         "params": {"output": "Y", **params}, **ordering},
    ])


def rows(sid: int, times_ms: list[int], k: int = 0) -> list[bytes]:
    return [sensor_row(sid, T0 + ms * PS_PER_MS, k).encode() for ms in times_ms]


def held(worker: Worker, stream: str) -> list[dict[str, Any]]:
    buffer = worker.outputs[stream].buffer
    return [orjson.loads(item) for item in buffer.read(-1, oldest=buffer.capacity).items]


async def run(repository: RepositoryServer, workers: WorkerGroup, speculative: bool, late_k: int) -> dict[str, Any]:
    """Feed both levels, the out-of-order row once they have emitted, then the end; what each level did."""
    workflow = parse_workflow(two_levels(repository.port, speculative))
    _fwd, level1, level2 = await workers.start(workflow)
    _reader, writer = await asyncio.open_connection(HOST, workflow.worker("F").params["ingest_port"])
    try:
        first = rows(A, A_MS) + rows(B, B_MS) + rows(C, C_MS)
        writer.write(b"".join(line + b"\n" for line in first))
        await writer.drain()
        if speculative:
            # Level 1 emits X below min(A, B) = 50 ms and says so in X's raw watermark (raw_wm); level 2 emits
            # below min(raw_wm, C), C42 included. Without raw_wm it would stop below X's newest tuple (B45).
            await wait_until(lambda: level1.outputs["X"].next_index == 8, timeout_s=60)
            await wait_until(lambda: level1.outputs["X"].progress.raw_wm == T0 + 50 * PS_PER_MS - 1, timeout_s=60)
            await wait_until(lambda: level2.outputs["Y"].next_index == 13, timeout_s=60)
        before = {"L1": level1.component.unit.metrics(), "L2": level2.component.unit.metrics()}
        writer.write(rows(A, [LATE_MS], late_k)[0] + b"\n")
        for sid in (A, B, C):
            writer.write(promise_line(f"SENSOR{sid}", END_OF_STREAM) + b"\n")
        await writer.drain()
        await wait_until(lambda: level2.component.unit.ended and level1.component.unit.ended, timeout_s=60)
        await wait_until(lambda: all(
            w.outputs[s].settled in (None, w.outputs[s].next_index - 1) for w, s in ((level1, "X"), (level2, "Y"))
        ), timeout_s=60)
    finally:
        writer.close()
    result = {"X": held(level1, "X"), "Y": held(level2, "Y"), "before": before}
    if speculative:
        result["L1"] = level1.component.counters()["ordering"]["speculation"]
        result["L2"] = level2.component.counters()["ordering"]["speculation"]
        result["X_out"] = level1.outputs["X"].counters()
        result["Y_out"] = level2.outputs["Y"].counters()
        url = f"http://{HOST}:{level2.server.port}/metrics"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session, \
                session.get(url) as response:
            result["L2_metrics"] = await response.text()
    await workers.stop_all()
    return result


@pytest.mark.parametrize("changes_level_1", [True, False], ids=["late-row-kept", "late-row-dropped"])
async def test_a_retraction_cascades_only_as_far_as_the_output_changes(
    repository: RepositoryServer, workers: WorkerGroup, changes_level_1: bool
) -> None:
    late_k = 0 if changes_level_1 else -1  # sensor_row's x = 1000 + k: -1 makes the filter drop the row
    speculative = await run(repository, workers, True, late_k)
    buffering = await run(repository, workers, False, late_k)
    level1, level2 = speculative["L1"], speculative["L2"]
    # Before the late row: nothing out of order anywhere, so no replay at either level.
    assert speculative["before"]["L1"]["speculation"]["replays"] == 0
    assert speculative["before"]["L2"]["speculation"]["replays"] == 0
    assert "X" in level2["raw_inputs"] and f"SENSOR{A}" in level1["raw_inputs"]
    # Level 1: the late row of A lands in front of what it emitted, one replay, caused by A.
    assert level1["replays"] == level1["inputs"]["replays"][f"SENSOR{A}"] == 1
    if changes_level_1:
        assert speculative["X_out"]["retractions"] == 1
        assert level2["inputs"]["retractions_received"]["X"] == 1
        assert level2["replays"] == level2["inputs"]["replays"]["X"] == 1  # exactly once per retraction
        assert speculative["Y_out"]["retractions"] == 1  # and level 2's output changed too
    else:
        # The replay starts at the batch that held the late row's place: at least the three tuples after it
        # come again, all unchanged.
        assert speculative["X_out"]["retractions"] == 0 and speculative["X_out"]["replayed_same"] >= 3
        assert level2["inputs"]["retractions_received"]["X"] == 0
        assert level2["replays"] == 0 and speculative["Y_out"]["retractions"] == 0
    assert level2["inputs"]["replays"][f"SENSOR{C}"] == 0
    replays_x = re.search(r'^pan_component_ordering_speculation_inputs_replays\{[^}]*stream="X"[^}]*\} (\S+)$',
                          speculative["L2_metrics"], re.MULTILINE)
    assert replays_x is not None and float(replays_x.group(1)) == level2["inputs"]["replays"]["X"]
    # The settled outputs of both levels are the buffering run's.
    assert speculative["X"] == buffering["X"] and speculative["Y"] == buffering["Y"]
    kept = len(A_MS) + len(B_MS) + changes_level_1
    assert len(buffering["X"]) == kept and len(buffering["Y"]) == kept + len(C_MS)
    assert [t["ts"] for t in buffering["Y"]] == sorted(t["ts"] for t in buffering["Y"])


@register
class SlotCloser(OrderedComponent):
    """Test-only: emits, at each release point, one tuple per 100 ts slot it has passed (as time-slot queries do)."""

    type_name = "test_slot_closer"
    own_params: ClassVar[tuple[str, ...]] = ("output",)
    state_attributes: ClassVar[tuple[str, ...] | None] = ("closed", "newest")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.closed = 0
        self.newest = -1

    @classmethod
    def main_outputs(cls, spec: WorkerSpec) -> list[str]:
        return [spec.params["output"]]

    def process(self, events: list[dict[str, Any]]) -> None:
        self.newest = max([self.newest, *(e["ts"] for e in events)])

    def on_release_point(self, limit: int) -> None:
        while (self.closed + 1) * 100 <= min(limit, self.newest) + 1:
            self.closed += 1
            self.ctx.outputs[self.params["output"]].append({"ts": self.closed * 100})


def test_what_a_release_point_emits_at_the_end_is_settled() -> None:
    """Tuples emitted by ``on_release_point`` after the unit's last settling must not stay unsettled: the
    settled view (and every reader of it) would wait for them forever."""
    from pan.components.testing import build_component

    component = build_component("test_slot_closer", {"output": "S", "clock_mode": "watermark", "min_k": 50},
                                ["A"], ordering={"mode": "speculative", "alpha": 0})
    assert isinstance(component, OrderedComponent)
    component.feed("A", [{"ts": t} for t in range(0, 1001, 10)])  # the slot ending at 1000 closes at the end
    component.finish()
    out = component.ctx.outputs["S"]
    assert out.next_index == 10 and component.unit.ended  # slots ending at 100 ... 1000
    assert out.settled == out.next_index - 1
