"""Sensor simulator against receivers that are away, come up late, or run on skewed clocks (WTT alignment)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from simulator.clock import SkewedTime
from simulator.replay import SUPERVISED_CONNECT_TIMEOUT_S, SUPERVISED_GIVE_UP_S
from simulator.simulate import simulate
from simulator.simulate_options import GIVE_UP_S, SimulateOptions
from tests.conftest import forwarder, free_port, make_workflow, wait_until
from tests.simulator.split_folders import ALL, PS, T0, rate_rows, small_match, write_split
from tests.simulator.tcp_recorder import Recorder, recorder_workflow


@pytest.mark.parametrize("speedup", [0.0, 4.0])
async def test_unreachable_receiver_is_reported_not_fatal(tmp_path: Path, speedup: float) -> None:
    workflow = make_workflow(free_port(), [forwarder("F", ALL)])  # nobody listens on its ingest port
    data = small_match(tmp_path / "split", seconds=0.5)
    summary = await simulate(SimulateOptions(workflow, data, speedup=speedup, give_up_s=0.3))
    assert summary.sent == 0
    assert summary.lost == 1000 + 100 + 100 + 2 + 50  # rows, interruptions, heartbeats
    assert summary.streams["SENSOR4"].lost_disconnected == 1000
    assert summary.streams["SENSOR4"].connect_failures >= 1
    assert any("cannot connect" in e for e in summary.errors)


async def late_receiver(port: int) -> tuple[asyncio.Server, list[bytes]]:
    """A receiver that starts listening on ``port`` now, and the data rows (not promises) it gets."""
    got: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            if b'"promise":true' not in line:
                got.append(line)

    return await asyncio.start_server(handle, "127.0.0.1", port), got


async def test_receiver_that_comes_up_late_gets_the_rest(recorder: Recorder, tmp_path: Path) -> None:
    """Paced: rows due while the receiver is away are lost and counted; later ones arrive."""
    port = free_port()
    workflow = make_workflow(free_port(), [forwarder("R", ["SENSOR13"], ingest_port=port)])
    data = write_split(tmp_path / "split", {13: rate_rows(T0, 1.0, 200)})
    task = asyncio.create_task(simulate(SimulateOptions(workflow, data, speedup=1.0)))
    await asyncio.sleep(0.4)
    server, got = await late_receiver(port)
    try:
        summary = await task
    finally:
        server.close()
    stats = summary.streams["SENSOR13"]
    assert stats.sent + stats.lost_disconnected == 200
    assert 0 < stats.sent < 200 and stats.connects == 1
    await wait_until(lambda: len(got) == stats.sent)
    assert [int(x.split(b",")[1]) for x in got] == rate_rows(T0, 1.0, 200)[200 - stats.sent :]


@pytest.mark.slow  # it must outlast the plain give-up time
async def test_a_replays_unpaced_sensors_wait_for_a_receiver_longer_than_a_plain_simulation(tmp_path: Path) -> None:
    """`pan replay` supervises its peers, so a silent receiver is starved, not gone: every row reaches it later."""
    port = free_port()
    workflow = make_workflow(free_port(), [forwarder("R", ["SENSOR13"], ingest_port=port)])
    rows = rate_rows(T0, 1.0, 200)
    data = write_split(tmp_path / "split", {13: rows})
    options = SimulateOptions(workflow, data, speedup=0.0, give_up_s=SUPERVISED_GIVE_UP_S,
                              connect_timeout_s=SUPERVISED_CONNECT_TIMEOUT_S)
    task = asyncio.create_task(simulate(options))
    await asyncio.sleep(GIVE_UP_S + 1)  # the receiver is away longer than a plain `pan simulate` waits
    assert not task.done()
    server, got = await late_receiver(port)
    try:
        summary = await asyncio.wait_for(task, 120)
    finally:
        server.close()
    stats = summary.streams["SENSOR13"]
    assert stats.sent == 200 and stats.lost == 0 and stats.connect_failures >= 1
    await wait_until(lambda: len(got) == 200)
    assert [int(x.split(b",")[1]) for x in got] == rows


async def test_wtt_aligns_two_simulators_with_skewed_clocks(recorder: Recorder, tmp_path: Path) -> None:
    """Two simulators, one clock 20 s ahead: with WTT both start at the same master time."""
    data = write_split(tmp_path / "split", {13: rate_rows(T0, 0.3, 200), 14: rate_rows(T0, 0.3, 200)})
    workflow = recorder_workflow(recorder, ["SENSOR13", "SENSOR14"])
    port = free_port()
    master_clock = SkewedTime()
    start_ms = master_clock.now_ns() // 1_000_000 + 1200
    master = SimulateOptions(workflow, data, sensors=["SENSOR13"], speedup=1.0, start_at_ms=start_ms,
                             clock=master_clock, wtt_master=("127.0.0.1", port))
    slave = SimulateOptions(workflow, data, sensors=["SENSOR14"], speedup=1.0, start_at_ms=start_ms,
                            clock=SkewedTime(offset_ns=20 * PS // 1000), wtt_slave=("127.0.0.1", port))
    a, b = await asyncio.gather(simulate(master), simulate(slave))
    assert a.sent == b.sent == 60
    assert b.wtt["role"] == "slave" and abs(b.wtt["delta_ns"] + 20 * 10**9) < 50_000_000
    first = {}
    for arrived, line in recorder.lines():
        first.setdefault(line.split(b",")[0], arrived)
    assert abs(first[b"13"] - first[b"14"]) < 50_000_000  # same moment, despite the 20 s skew
