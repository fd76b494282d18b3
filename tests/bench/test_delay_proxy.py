"""The delaying TCP proxy of `pan bench network`: real sockets on loopback.

No performance asserts: only that the configured delay is a lower bound, that
seeds determine the delays, that order holds and that shutdown is clean.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import AsyncIterator

import pytest

from benchmarks.delay_proxy import DelayModel, DelayProxy
from pan.http.addresses import free_port

HOST = "127.0.0.1"


@pytest.fixture
async def echo_port() -> AsyncIterator[int]:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, HOST, 0)
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


async def round_trip(port: int, payload: bytes) -> float:
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        started = time.perf_counter()
        writer.write(payload)
        await writer.drain()
        got = await reader.readexactly(len(payload))
        assert got == payload
        return time.perf_counter() - started
    finally:
        writer.close()


async def test_adds_at_least_the_configured_delay(echo_port: int) -> None:
    async with DelayProxy((HOST, 0), (HOST, echo_port), DelayModel(delay_ms=40)) as proxy:
        rtts = [await round_trip(proxy.port, b"x" * 100) for _ in range(3)]
    # 40 ms each way; loose upper bound because the machine is shared.
    assert all(0.080 <= rtt < 2.0 for rtt in rtts), rtts


async def test_live_model_change_reaches_open_connections(echo_port: int) -> None:
    async with DelayProxy((HOST, 0), (HOST, echo_port), DelayModel()) as proxy:
        reader, writer = await asyncio.open_connection(HOST, proxy.port)
        writer.write(b"a")
        await reader.readexactly(1)
        proxy.set_model(DelayModel(delay_ms=50))
        started = time.perf_counter()
        writer.write(b"b")
        await reader.readexactly(1)
        assert time.perf_counter() - started >= 0.100
        writer.close()


def test_seeded_delays_are_deterministic() -> None:
    model = DelayModel(delay_ms=10, jitter_ms=3, loss=0.2, rto_ms=200, seed=7)
    first = model.sequence(200, connection=3, direction=1)
    assert first == DelayModel(delay_ms=10, jitter_ms=3, loss=0.2, rto_ms=200, seed=7).sequence(200, 3, 1)
    assert first != DelayModel(delay_ms=10, jitter_ms=3, loss=0.2, rto_ms=200, seed=8).sequence(200, 3, 1)
    assert first != model.sequence(200, connection=3, direction=0)
    assert all(d >= 0 for d in first)
    # Loss shows up as retransmission delays of about rto_ms.
    assert 10 <= sum(d > 0.15 for d in first) <= 80
    uniform = DelayModel(delay_ms=10, jitter_ms=4, jitter="uniform", seed=1).sequence(500)
    assert all(0.006 - 1e-9 <= d <= 0.014 + 1e-9 for d in uniform)


def test_model_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        DelayModel(loss=1.5)
    with pytest.raises(ValueError):
        DelayModel(delay_ms=-1)


async def test_order_preserved_under_jitter(echo_port: int) -> None:
    """Large jitter would reorder independent chunks; the proxy must not."""
    model = DelayModel(delay_ms=5, jitter_ms=20, seed=3)
    async with DelayProxy((HOST, 0), (HOST, echo_port), model) as proxy:
        reader, writer = await asyncio.open_connection(HOST, proxy.port)
        expected = b"".join(b"%06d\n" % n for n in range(300))
        for n in range(300):
            writer.write(b"%06d\n" % n)
            await writer.drain()
            if n % 10 == 0:
                await asyncio.sleep(0.002)  # separate chunks
        got = await asyncio.wait_for(reader.readexactly(len(expected)), 20)
        assert got == expected
        assert proxy.counters.chunks > 2
        writer.close()


async def test_stop_closes_open_connections(echo_port: int) -> None:
    proxy = DelayProxy((HOST, 0), (HOST, echo_port), DelayModel(delay_ms=1))
    await proxy.start()
    reader, writer = await asyncio.open_connection(HOST, proxy.port)
    writer.write(b"ping")
    assert await reader.readexactly(4) == b"ping"
    await asyncio.wait_for(proxy.stop(), 5)
    assert await asyncio.wait_for(reader.read(10), 5) == b""  # closed, not hanging
    writer.close()
    with pytest.raises(OSError):
        await asyncio.open_connection(HOST, proxy.port)


async def test_target_down_closes_client_and_proxy_survives(echo_port: int) -> None:
    dead = free_port()
    async with DelayProxy((HOST, 0), (HOST, dead), DelayModel()) as proxy:
        reader, writer = await asyncio.open_connection(HOST, proxy.port)
        assert await asyncio.wait_for(reader.read(10), 5) == b""
        writer.close()
        assert proxy.counters.target_failures == 1
        proxy.target = (HOST, echo_port)  # the proxy still accepts and serves
        assert await round_trip(proxy.port, b"hello") < 5


@pytest.mark.process
def test_cli_runs_and_stops() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.delay_proxy", "--listen", f"{HOST}:{port}", "--target", f"{HOST}:1",
         "--delay-ms", "5", "--jitter-ms", "1", "--loss", "0.01", "--seed", "4"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith(b"proxy ")
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0
