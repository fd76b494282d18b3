"""WeakTrueTime over real UDP on loopback, with clock offsets injected (never the system clock)."""

from __future__ import annotations

import asyncio
import itertools
import time

import orjson
import pytest

from simulator.clock import LocalTime, SkewedTime
from simulator.wtt import WTTMaster, WTTSlaveTime, parse_address
from tests.conftest import wait_until

HOST = "127.0.0.1"
S = 1_000_000_000


@pytest.fixture
async def master() -> WTTMaster:
    m = WTTMaster(HOST, 0, clock=SkewedTime(offset_ns=0), sync_period_s=0.05, alive_timeout_s=0.3)
    await m.start()
    yield m
    await m.stop()


async def test_slave_converges_to_master_offset(master: WTTMaster) -> None:
    # The slave's machine clock is 20 s behind; the master's is the reference.
    slave = WTTSlaveTime((HOST, master.port), clock=SkewedTime(offset_ns=-20 * S), alive_period_s=0.05)
    await slave.start()
    try:
        assert await slave.wait_synced(2.0)
        assert abs(slave.now_ns() - master.now_ns()) < 20_000_000  # 20 ms on loopback
        assert abs(slave.delta_ns - 20 * S) < 20_000_000
        assert (HOST, slave._transport.get_extra_info("sockname")[1]) in master.slaves
    finally:
        await slave.stop()


async def test_slave_follows_drifting_master(master: WTTMaster) -> None:
    master.clock = SkewedTime(offset_ns=5 * S, drift_ppm=50_000)  # 5 % fast: a badly broken clock
    slave = WTTSlaveTime((HOST, master.port), alive_period_s=0.05)
    await slave.start()
    try:
        assert await slave.wait_synced(2.0)
        updates = slave.updates
        await wait_until(lambda: slave.updates >= updates + 4)
        # Within one sync period of drift (50 ms * 5 % = 2.5 ms) plus loopback latency.
        assert abs(slave.now_ns() - master.now_ns()) < 15_000_000
    finally:
        await slave.stop()


async def test_slave_stays_monotonic_when_master_steps_back(master: WTTMaster) -> None:
    slave = WTTSlaveTime((HOST, master.port), alive_period_s=0.05)
    await slave.start()
    try:
        assert await slave.wait_synced(2.0)
        before = slave.now_ns()
        master.clock.step(-300_000_000)  # master clock set back by 300 ms
        updates = slave.updates
        readings = []
        deadline = time.monotonic() + 0.6
        while time.monotonic() < deadline:
            readings.append(slave.now_ns())
            await asyncio.sleep(0.005)
        assert slave.updates > updates  # the smaller time was accepted (newer seq) ...
        assert all(b >= a for a, b in itertools.pairwise(readings))  # ... yet never went back
        assert readings[0] >= before
        # Time stood still for about the step, then follows the master again.
        assert abs(slave.now_ns() - master.now_ns()) < 20_000_000
    finally:
        await slave.stop()


async def test_master_drops_silent_slaves_and_keeps_live_ones(master: WTTMaster) -> None:
    live = WTTSlaveTime((HOST, master.port), alive_period_s=0.05)
    silent = WTTSlaveTime((HOST, master.port), alive_period_s=0.05)
    await live.start()
    await silent.start()
    try:
        await wait_until(lambda: len(master.slaves) == 2)
        await silent.stop()  # no more ALIVE messages
        await wait_until(lambda: len(master.slaves) == 1, timeout_s=3)
        live_port = live._transport.get_extra_info("sockname")[1]
        assert list(master.slaves) == [(HOST, live_port)]
        sent = master.sent
        await asyncio.sleep(0.3)
        assert master.sent > sent  # still syncing the live one
    finally:
        await live.stop()


async def test_alive_handling_and_bad_datagrams(master: WTTMaster) -> None:
    """A raw socket: ALIVE gets an immediate time message; garbage is ignored, never fatal."""
    loop = asyncio.get_running_loop()
    got: asyncio.Queue[bytes] = asyncio.Queue()

    class Probe(asyncio.DatagramProtocol):
        def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
            got.put_nowait(data)

    transport, _ = await loop.create_datagram_endpoint(Probe, remote_addr=(HOST, master.port))
    try:
        transport.sendto(b"not json")
        transport.sendto(b'{"t":"hello"}')
        transport.sendto(b'{"t":"alive"}')
        message = orjson.loads(await asyncio.wait_for(got.get(), 2))
        assert message["t"] == "time" and message["epoch"] == master.epoch
        assert abs(message["ns"] - master.now_ns()) < 50_000_000
        assert master.ignored == 2 and len(master.slaves) == 1
    finally:
        transport.close()


async def test_slave_drops_reordered_and_malformed_messages() -> None:
    slave = WTTSlaveTime((HOST, 9), clock=LocalTime())  # never started: feed datagrams directly
    now = time.time_ns()
    slave._received(orjson.dumps({"t": "time", "epoch": 1, "seq": 5, "ns": now + 10 * S}), (HOST, 9))
    slave._received(orjson.dumps({"t": "time", "epoch": 1, "seq": 4, "ns": now + 99 * S}), (HOST, 9))
    slave._received(b"garbage", (HOST, 9))
    slave._received(orjson.dumps({"t": "time", "epoch": 1, "seq": "6", "ns": now}), (HOST, 9))
    assert slave.updates == 1 and slave.dropped == 3
    assert abs(slave.delta_ns - 10 * S) < 50_000_000
    # A restarted master (new epoch) starts its seq over and is accepted.
    slave._received(orjson.dumps({"t": "time", "epoch": 2, "seq": 1, "ns": now + 11 * S}), (HOST, 9))
    assert slave.updates == 2 and abs(slave.delta_ns - 11 * S) < 50_000_000


async def test_unsynced_slave_reports_timeout() -> None:
    slave = WTTSlaveTime((HOST, 9), alive_period_s=0.05)  # nobody listens on the discard port
    await slave.start()
    try:
        assert not await slave.wait_synced(0.2)
        assert slave.status()["synced"] is False
    finally:
        await slave.stop()


def test_parse_address() -> None:
    assert parse_address("10.0.0.1:5000") == ("10.0.0.1", 5000)
    assert parse_address(":5000") == ("0.0.0.0", 5000)
    assert parse_address("5000", "127.0.0.1") == ("127.0.0.1", 5000)
    with pytest.raises(ValueError):
        parse_address("host:port")
