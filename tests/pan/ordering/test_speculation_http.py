"""A speculative ordering unit in a real worker: retraction through the pull protocol.

A merge runs speculatively (alpha 0: every event goes to the component at once); rows of each
sensor arrive partly out of order, one chunk at a time. A raw reader (``view="raw"``) reads
every chunk's output before the next chunk comes, so the held-back rows of the next chunk make
the merge restore a snapshot, withdraw what it published after it, and publish again: the raw
reader gets ``retract`` markers. Applying them, it must end with exactly the tuples of the
settled view, which never shows a tuple that a retraction could still touch. A repeater of the
merged stream reads it raw and passes the retractions and the settled prefix on: readers of its
copy end the same way.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from pan.ingest.lines import END_OF_STREAM, promise_line
from pan.input.subscriber import StreamSubscriber
from pan.repository.server import RepositoryServer
from pan.workflow.parser import parse_workflow
from tests.conftest import HOST, WorkerGroup, forwarder, free_port, get_json, sensor_row, wait_until, workflow_dict

PS_PER_MS = 10**9
T0 = 10**15
CHUNKS = 12
ROWS_PER_CHUNK = 20


def speculative_merge(**ordering: Any) -> dict[str, Any]:
    return {"name": "M", "type": "merge", "host": HOST, "port": free_port(), "inputs": ["SENSOR4", "SENSOR13"],
            "params": {"output": "X", "lambda": 0}, "ordering": {"mode": "speculative", **ordering}}


async def collect(subscriber: StreamSubscriber, into: list[dict[str, Any]], markers: list[dict[str, Any]]) -> None:
    async for item in subscriber:
        if "retract" in item:
            markers.append(item)
            del into[next((n for n, t in enumerate(into) if t["i"] > item["retract"]["after"]), len(into)):]
        elif "i" in item:
            into.append(item)


def test_the_ordering_object_is_validated() -> None:
    data = workflow_dict(1, [forwarder("F", ["SENSOR4", "SENSOR13"]), speculative_merge(alpha=2)])
    with pytest.raises(Exception, match=r"ordering.alpha"):
        parse_workflow(data)
    data = workflow_dict(1, [forwarder("F", ["SENSOR4"], ordering={"mode": "speculative"})])
    with pytest.raises(Exception, match="has no ordering unit"):
        parse_workflow(data)
    spec = parse_workflow(workflow_dict(1, [forwarder("F", ["SENSOR4", "SENSOR13"]), speculative_merge(alpha=0.5)]))
    assert spec.worker("M").ordering == {"mode": "speculative", "alpha": 0.5}


async def test_a_raw_reader_that_applies_retractions_ends_with_the_settled_view(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    repeater = {"name": "R", "type": "repeater", "host": HOST, "port": free_port(), "inputs": ["X"]}
    workflow = parse_workflow(workflow_dict(repository.port, [
        forwarder("F", ["SENSOR4", "SENSOR13"], buffer_size=20_000), speculative_merge(alpha=0), repeater]))
    _fwd, merge, rep = await workers.start(workflow)
    raw: list[dict[str, Any]] = []
    settled: list[dict[str, Any]] = []
    markers: list[dict[str, Any]] = []
    repeated: list[dict[str, Any]] = []  # raw, through the repeater: it passes the retractions on
    repeated_settled: list[dict[str, Any]] = []
    address = f"{HOST}:{repository.port}"
    raw_sub = StreamSubscriber("X", address, view="raw", gaps=True, max_wait_ms=200)
    settled_sub = StreamSubscriber("X", address, gaps=True, max_wait_ms=200)
    producer = (f"{HOST}:{merge.server.port}",)
    rep_sub = StreamSubscriber("X", address, view="raw", gaps=True, max_wait_ms=200, exclude=producer)
    rep_settled_sub = StreamSubscriber("X", address, gaps=True, max_wait_ms=200, exclude=producer)
    subscribers = [raw_sub, settled_sub, rep_sub, rep_settled_sub]
    for sub in subscribers:
        await sub.start()
    tasks = [asyncio.create_task(collect(raw_sub, raw, markers)),
             asyncio.create_task(collect(settled_sub, settled, [])),
             asyncio.create_task(collect(rep_sub, repeated, [])),
             asyncio.create_task(collect(rep_settled_sub, repeated_settled, []))]
    rng = random.Random(5)
    _reader, writer = await asyncio.open_connection(HOST, workflow.worker("F").params["ingest_port"])
    output = merge.outputs["X"]
    held: list[bytes] = []  # rows held back to the next chunk
    sent = 0
    try:
        for chunk in range(CHUNKS + 1):
            lines, later = [], []
            for n in range(ROWS_PER_CHUNK if chunk < CHUNKS else 0):
                ts = T0 + (chunk * ROWS_PER_CHUNK + n) * PS_PER_MS
                for sid in (4, 13):
                    line = sensor_row(sid, ts + sid, n).encode()
                    (later if rng.random() < 0.1 else lines).append(line)
            batch = lines + held  # this chunk's rows, then the previous chunk's held-back ones
            writer.write(b"".join(line + b"\n" for line in batch))
            await writer.drain()
            sent += len(batch)
            held = later
            await wait_until(lambda s=sent: merge.component.unit.metrics()["pushed"] >= s, timeout_s=60)
            # The raw reader has what the merge published so far before the next chunk arrives.
            await wait_until(lambda: raw_sub.position >= output.next_index - 1, timeout_s=60)
        for sid in (4, 13):
            writer.write(promise_line(f"SENSOR{sid}", END_OF_STREAM) + b"\n")
        await writer.drain()
        await wait_until(lambda: merge.component.unit.ended and output.settled == output.next_index - 1, timeout_s=60)
        await wait_until(lambda: len(settled) == output.next_index and raw_sub.position == output.next_index - 1,
                         timeout_s=60)
        await wait_until(lambda: len(repeated_settled) == output.next_index
                         and rep_sub.position == output.next_index - 1, timeout_s=60)
    finally:
        writer.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for sub in subscribers:
            await sub.close()
    info = (await get_json(f"http://{HOST}:{merge.server.port}/streams"))[1]
    spec_metrics = info["component"]["ordering"]["speculation"]
    assert spec_metrics["replays"] > 0 and info["outputs"]["X"]["retractions"] > 0
    assert markers and raw_sub.state.stats.retractions > 0  # the raw reader had read what was withdrawn
    assert raw == settled
    assert rep_sub.source is not None and rep_sub.source.rep  # read through the repeater
    assert rep.outputs["X"].retractions > 0 and rep.outputs["X"].retractions == output.retractions
    assert repeated == settled and repeated_settled == settled
    assert [t["i"] for t in settled] == list(range(len(settled)))
    assert len(settled) + info["component"]["ordering"]["late"] == sent
    assert settled == sorted(settled, key=lambda t: (t["ts"], t["sid"] != 4))


async def test_alpha_auto_speculates_more_while_the_component_has_headroom(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    """An idle merge uses far less than 80% of its time: alpha halves every span, shown in /streams. (It goes
    by the component's own share, ``cpu: component``: the machine's share depends on what else runs.)"""
    workflow = parse_workflow(workflow_dict(repository.port, [
        forwarder("F", ["SENSOR4", "SENSOR13"]), speculative_merge(alpha="auto", cpu="component")]))
    _fwd, merge = await workers.start(workflow)
    url = f"http://{HOST}:{merge.server.port}/streams"

    async def alpha() -> float:
        return (await get_json(url))[1]["component"]["ordering"]["speculation"]["alpha"]

    assert await alpha() == 1.0  # starts as a buffering unit
    await wait_until(lambda: _below(alpha, 0.3), timeout_s=60)
    info = (await get_json(url))[1]["component"]["ordering"]["speculation"]
    assert info["alpha_mode"] == "auto"


async def _below(alpha: Any, bound: float) -> bool:
    return await alpha() < bound
