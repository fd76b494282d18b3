"""A replay that loses nothing: lossless delivery inside the workflow and a feed that waits (issue 18)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from pan.buffers.streams import OutputStream
from pan.config.specs import WorkflowError
from pan.ingest.server import send_lines
from pan.repository.server import RepositoryServer
from pan.workflow.parser import parse_workflow
from simulator.backpressure import FeedBrake, unread_per_buffer
from simulator.clock import LocalTime
from simulator.simulate_pacing import Pacer
from tests.conftest import HOST, WorkerGroup, forwarder, get_json, repeater, sensor_row, wait_until, workflow_dict

STREAMS = ["SENSOR4"]


def two_workers(repo_port: int, delivery: str | None) -> dict[str, Any]:
    data = workflow_dict(repo_port, [forwarder("F", STREAMS, buffer_size=5), repeater("R", STREAMS, 1, buffer_size=5)])
    if delivery is not None:
        data["delivery"] = delivery
    return data


def test_delivery_is_live_unless_the_workflow_says_lossless() -> None:
    assert parse_workflow(two_workers(9000, None)).delivery == "live"
    assert parse_workflow(two_workers(9000, "lossless")).delivery == "lossless"
    with pytest.raises(WorkflowError, match=r"delivery.*'live', 'lossless'"):
        parse_workflow(two_workers(9000, "eventually"))


def test_holders_behind_counts_what_the_slowest_holder_has_not_read() -> None:
    stream = OutputStream("S", capacity=4)
    assert stream.counters()["holders_behind"] == 0 and stream.counters()["buffer_size"] == 4
    stream.hold("a", -1)
    stream.hold("b", 5)
    stream.extend([{"ts": n} for n in range(10)])
    counters = stream.counters()
    assert counters["holders_behind"] == 10 and counters["capacity"] >= 10  # "a" has read nothing: kept for it
    stream.hold("a", 7)
    assert stream.counters()["holders_behind"] == 4  # "b" now, after 5


@pytest.mark.parametrize("delivery", ["live", "lossless"])
async def test_a_stopped_reader_finds_everything_only_with_lossless_delivery(
        repository: RepositoryServer, workers: WorkerGroup, delivery: str) -> None:
    """A repeater that stops reading for a burst of 40 into a 5-deep ring: lossless keeps them for it."""
    workflow = parse_workflow(two_workers(repository.port, delivery))
    forwarder_worker, repeater_worker = await workers.start(workflow)
    ingest = workflow.workers[0].params["ingest_port"]
    await send_lines(HOST, ingest, [sensor_row(4, k).encode() for k in range(3)], timeout_s=30)
    await wait_until(lambda: repeater_worker.outputs["SENSOR4"].buffer.last == 2, timeout_s=60)
    await repeater_worker.stop()
    workers.workers.remove(repeater_worker)
    await send_lines(HOST, ingest, [sensor_row(4, 3 + k).encode() for k in range(40)], timeout_s=30)
    await wait_until(lambda: forwarder_worker.outputs["SENSOR4"].buffer.last == 42, timeout_s=60)
    _, described = await get_json(f"http://{HOST}:{forwarder_worker.server.port}/streams")
    behind = described["outputs"]["SENSOR4"]["holders_behind"]
    assert behind == (40 if delivery == "lossless" else 0)
    assert unread_per_buffer(described) == {"SENSOR4": behind / 5}

    [restarted] = await workers.start(workflow, names=["R"])
    await wait_until(lambda: restarted.outputs["SENSOR4"].buffer.last == 42, timeout_s=60)
    received = restarted.inputs["SENSOR4"].counters.received
    if delivery == "lossless":
        assert received >= 40  # every tuple of the burst, from the oldest the forwarder kept for the holder
    else:
        assert received <= 5  # the ring's depth: the rest was overwritten


async def test_the_pacer_leaves_the_stall_out_of_its_schedule() -> None:
    workflow = parse_workflow(two_workers(9000, None))
    brake = FeedBrake(workflow)
    clock = LocalTime()
    pacer = Pacer(clock, clock.now_ns(), 1_000_000, brake)
    brake.update({"S": 2.0})  # engaged: more unread than buffer_size
    assert brake.engaged and brake.stats.worst == "S" and brake.stats.engaged == 1
    brake.update({"S": 0.8})  # between the thresholds: still engaged (no flapping)
    assert brake.engaged

    async def release_later() -> None:
        await asyncio.sleep(0.3)
        brake.update({"S": 0.4})

    releasing = asyncio.create_task(release_later())
    before = time.monotonic()
    await asyncio.gather(*(pacer.tick(0) for _ in range(3)))  # three sensors at one stall
    waited = time.monotonic() - before
    await releasing
    assert not brake.engaged
    assert brake.stats.stalls == 1 and 0.25 <= brake.stats.longest_s <= waited
    assert pacer.paused_ns >= 0.25e9
    assert pacer.elapsed_ns() < (clock.now_ns() - pacer.start_ns) - 0.25e9  # the schedule moved by the stall
