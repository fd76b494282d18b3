"""The live view's server side (pan/live/hub.py, pan/live/web.py) against a real repository and forwarder.

Issue 16: many open tabs cost the publishers nothing extra (one PAN subscription per stream, shared by
all browsers), a slow browser skips frames instead of queueing them, frames go out at most 25 times a
second, and a bad message from a browser gets an error, never a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web

from pan.http.addresses import free_port
from pan.live import hub as live_hub
from pan.live.hub import StreamHub
from pan.live.web import DEFAULT_MAX_RATE_HZ, LiveServer
from pan.repository.server import RepositoryServer
from pan.security.auth import Credentials
from pan.worker.worker import Worker
from tests.conftest import HOST, forwarder, make_workflow, sensor_row, wait_until

STREAMS = ["SENSOR4", "SENSOR8", "SENSOR10"]
BROWSERS = 50
PS = 10**12


async def feed(ingest_port: int, stop: asyncio.Event) -> None:
    """Rows into every stream, 200 a second each, until told to stop."""
    _, writer = await asyncio.open_connection(HOST, ingest_port)
    ts = 10**16
    try:
        while not stop.is_set():
            ts += 5 * 10**9
            writer.write("".join(sensor_row(int(s.removeprefix("SENSOR")), ts) + "\n" for s in STREAMS).encode())
            await writer.drain()
            await asyncio.sleep(0.005)
    finally:
        writer.close()


@pytest.fixture
async def live(tmp_path: Path, repository: RepositoryServer) -> AsyncIterator[tuple[LiveServer, Worker, str]]:
    """A forwarder fed with rows, and a live server on the repository; yields it, the worker and its URL."""
    workflow = make_workflow(repository.port, [forwarder("fwd", STREAMS)])
    worker = Worker(workflow.workers[0], workflow.repository)
    await worker.start()
    stop = asyncio.Event()
    feeder = asyncio.create_task(feed(int(worker.component.counters()["ingest_port"]), stop))
    (tmp_path / "index.html").write_text("<!doctype html><title>live</title>")
    server = LiveServer(StreamHub((HOST, repository.port)), tmp_path)
    runner = web.AppRunner(server.app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, HOST, port).start()
    try:
        yield server, worker, f"http://{HOST}:{port}"
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await feeder
        await server.hub.close()
        await runner.cleanup()
        await worker.stop()


async def open_browser(session: aiohttp.ClientSession, url: str, want: list[str]) -> aiohttp.ClientWebSocketResponse:
    ws = await session.ws_connect(f"{url}/ws", timeout=aiohttp.ClientWSTimeout(ws_close=10))
    hello = orjson.loads((await ws.receive(timeout=30)).data)
    assert "server" in hello["hello"]
    await ws.send_str(orjson.dumps({"want": want}).decode())
    return ws


async def frames_until(ws: aiohttp.ClientWebSocketResponse, streams: set[str], timeout_s: float = 60) -> list[dict]:
    """Frames until every stream in ``streams`` has come at least once."""
    frames: list[dict] = []
    seen: set[str] = set()
    async with asyncio.timeout(timeout_s):
        while not streams <= seen:
            frame = orjson.loads((await ws.receive()).data)
            frames.append(frame)
            seen |= set(frame.get("streams", {}))
    return frames


async def metric(session: aiohttp.ClientSession, url: str, name: str) -> float:
    async with session.get(f"{url}/metrics", timeout=aiohttp.ClientTimeout(total=10)) as response:
        for line in (await response.text()).splitlines():
            if line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


async def test_fifty_browsers_share_one_subscription_per_stream(live: tuple[LiveServer, Worker, str]) -> None:
    server, worker, url = live
    async with aiohttp.ClientSession() as session:
        browsers = [await open_browser(session, url, STREAMS) for _ in range(BROWSERS)]
        for ws in browsers:  # every browser gets every stream's tuples
            frames = await frames_until(ws, set(STREAMS))
            assert all(t["i"] >= 0 for f in frames for tuples in f["streams"].values() for t in tuples)
        assert await metric(session, url, "pan_live_browsers") == BROWSERS
        assert await metric(session, url, "pan_live_subscriptions") == len(STREAMS)
        assert await metric(session, url, "pan_live_subscriptions_opened_total") == len(STREAMS)
        # The publisher's side: one long poll per stream holds one connection; 50 browsers' own pulls would hold 50+.
        assert worker.server.stats.open_connections <= len(STREAMS) + 1, worker.server.stats.as_dict()
        for ws in browsers:
            await ws.close()
        await wait_until(lambda: server.hub.subscriptions == 0, timeout_s=30)  # the last one out closes them
        assert await metric(session, url, "pan_live_subscriptions_closed_total") == len(STREAMS)


async def test_changing_streams_drops_the_old_subscription(live: tuple[LiveServer, Worker, str]) -> None:
    server, _, url = live
    async with aiohttp.ClientSession() as session:
        ws = await open_browser(session, url, ["SENSOR4", "SENSOR8"])
        await frames_until(ws, {"SENSOR4", "SENSOR8"})
        await ws.send_str(orjson.dumps({"want": ["SENSOR10"]}).decode())
        await wait_until(lambda: set(server.hub.streams) == {"SENSOR10"}, timeout_s=30)
        await frames_until(ws, {"SENSOR10"})
        await ws.close()


async def test_frames_come_at_most_at_the_rate_limit(live: tuple[LiveServer, Worker, str]) -> None:
    _, _, url = live
    async with aiohttp.ClientSession() as session:
        ws = await open_browser(session, url, STREAMS)
        frames = await frames_until(ws, set(STREAMS))
        while len(frames) < 20:
            frames += await frames_until(ws, {"SENSOR4"})
        times = [f["t"] for f in frames]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        # 600 rows/s arrive; frames are paced by the server, never closer than its interval (ms, rounded down).
        assert min(gaps) >= int(1000 / DEFAULT_MAX_RATE_HZ) - 1, gaps
        await ws.close()


async def test_a_slow_browser_skips_frames_rather_than_queueing(live: tuple[LiveServer, Worker, str]) -> None:
    server, _, _ = live
    viewer = server.hub.viewer()
    viewer.want(["SENSOR4"])
    # This viewer never reads while tuples keep coming: its slot is overwritten, it holds one value.
    await wait_until(lambda: server.hub.stats.skipped >= 20, timeout_s=60)
    taken = viewer.take()
    assert list(taken) == ["SENSOR4"] and len(taken["SENSOR4"]) == 1
    newest = server.hub.streams["SENSOR4"].recent[-1]["i"]
    assert taken["SENSOR4"][0]["i"] >= newest - 50  # the newest, not the first it missed
    viewer.close()


@pytest.mark.parametrize("message", ["not json", '{"want": "SENSOR4"}', '{"want": [1]}', "[]",
                                     orjson.dumps({"want": [f"S{n}" for n in range(500)]}).decode()])
async def test_a_bad_message_gets_an_error_and_the_connection_stays(live: tuple[LiveServer, Worker, str],
                                                                   message: str) -> None:
    server, _, url = live
    async with aiohttp.ClientSession() as session:
        ws = await open_browser(session, url, [])
        await ws.send_str(message)
        answer = orjson.loads((await ws.receive(timeout=30)).data)
        assert "error" in answer
        assert server.hub.subscriptions == 0
        await ws.send_str(orjson.dumps({"want": ["SENSOR8"]}).decode())  # still served
        await frames_until(ws, {"SENSOR8"})
        await ws.close()


async def test_the_hub_refuses_streams_beyond_its_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live_hub, "MAX_STREAMS", 2)
    hub = StreamHub((HOST, free_port()))  # nobody answers there: the subscriptions keep looking, which is enough
    viewer = hub.viewer()
    viewer.want(["S1", "S2", "S3"])
    assert hub.subscriptions == 2 and hub.stats.refused == 1 and viewer.wanted == {"S1", "S2"}
    viewer.close()
    assert hub.subscriptions == 0 and hub.stats.closed == 2
    await hub.close()


async def test_a_refused_subscription_tells_every_viewer_why() -> None:
    """A hub without the read token of a closed repository: its viewers learn the reason, not an empty slot."""
    closed = RepositoryServer(HOST, free_port(), credentials=Credentials(b"a secret of sixteen bytes or more"))
    await closed.start()
    hub = StreamHub((HOST, closed.port), subscriber_options={"max_wait_ms": 200})
    try:
        first = hub.viewer()
        first.want(["SENSOR4"])
        await wait_until(lambda: "SENSOR4" in first.problems, timeout_s=60)
        assert "refused" in first.problems["SENSOR4"] and first.take() == {}
        assert first.take_problems().keys() == {"SENSOR4"} and first.problems == {}
        later = hub.viewer()
        later.want(["SENSOR4"])  # joins a failing stream: told at once, not at the next retry
        assert "refused" in later.take_problems()["SENSOR4"] and hub.stats.failures >= 1
    finally:
        await hub.close()
        await closed.stop()
