"""Multi-process integration over loopback: forwarder -> repeater -> repeater.

Everything runs as the product runs it: `pan run` starts the repository and
one OS process per peer; sensors write TCP rows; clients pull over HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import AsyncIterator

import orjson
import psutil
import pytest

from pan.http.addresses import free_port
from pan.ingest.server import send_lines
from pan.input.subscriber import StreamSubscriber
from pan.repository.client import RepositoryClient, RepositoryUnavailable
from tests.conftest import (
    Processes,
    forwarder,
    get_json,
    repeater,
    sensor_row,
    wait_until,
    workflow_dict,
)

pytestmark = pytest.mark.process  # every test here starts OS processes

REFRESH_MS = 400
STREAMS = ["SENSOR4", "SENSOR47"]


async def repository_streams(port: int) -> dict[str, list[dict]]:
    """Every stream the repository lists, across its `/streams` pages."""
    async with RepositoryClient(("127.0.0.1", port), timeout_s=10) as repository:
        return await repository.streams()


class Feeder:
    """A sensor that keeps writing rows to the forwarder until stopped."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.sent = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            rows = [sensor_row(4 if k % 2 else 47, self.sent + k).encode() for k in range(20)]
            await send_lines("127.0.0.1", self.port, rows)
            self.sent += len(rows)
            await asyncio.sleep(0.01)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


@pytest.fixture
async def network(processes: Processes) -> AsyncIterator[dict]:
    repo_port = free_port()
    specs = [
        forwarder("F", STREAMS, peer="p-forwarder", buffer_size=100_000),
        repeater("R1", STREAMS, 1, peer="p-rep1", buffer_size=100_000),
        repeater("R2", STREAMS, 2, peer="p-rep2", buffer_size=100_000),
    ]
    path = processes.write_workflow(workflow_dict(repo_port, specs, refresh_ms=REFRESH_MS))
    run = processes.pan("run", str(path), log_name="run")

    async with RepositoryClient(("127.0.0.1", repo_port)) as repository:
        await repository.wait_for_publishers(STREAMS, 30, publishers=3)  # the forwarder and both repeaters
    feeder = Feeder(specs[0]["params"]["ingest_port"])
    feeder.start()
    yield {"run": run, "specs": specs, "repo_port": repo_port, "feeder": feeder, "processes": processes}
    await feeder.stop()


def peer_process(run: psutil.Popen | object, peer: str) -> psutil.Process:
    parent = psutil.Process(run.pid)  # type: ignore[attr-defined]
    for child in parent.children():
        if child.cmdline()[-1] == peer:
            return child
    raise LookupError(peer)


def repository_process(run: object) -> psutil.Process:
    for child in psutil.Process(run.pid).children():  # type: ignore[attr-defined]
        if "repository" in child.cmdline():
            return child
    raise LookupError("repository")


async def test_identical_indices_from_every_publisher(network: dict) -> None:
    await wait_until(lambda: network["feeder"].sent >= 400)
    pages = []
    for spec in network["specs"]:
        url = f"http://127.0.0.1:{spec['port']}/data"
        await wait_until(lambda url=url: _has_index(url, 150), timeout_s=10)
        status, answer = await get_json(url, s="SENSOR4", i=-1, n=150)
        assert status == 200
        pages.append(answer["tuples"])
    assert pages[0] == pages[1] == pages[2]
    assert [t["i"] for t in pages[0]] == list(range(150))


async def _has_index(url: str, index: int) -> bool:
    _, answer = await get_json(url, s="SENSOR4", l=1)
    return answer["last"] >= index


async def test_sigkill_of_the_publisher_in_use_and_repository_restart(network: dict) -> None:
    repo = ("127.0.0.1", network["repo_port"])
    forwarder_endpoint = f"127.0.0.1:{network['specs'][0]['port']}"
    received: list[int] = []
    sub = StreamSubscriber("SENSOR4", repo, exclude=(forwarder_endpoint,), max_wait_ms=200, page_size=50)

    async def consume() -> None:
        async for batch in sub.batches():
            received.extend(t["i"] for t in batch)

    async with sub:
        consumer = asyncio.create_task(consume())
        try:
            await wait_until(lambda: len(received) > 200 and sub.source is not None, timeout_s=20)
            # 1. SIGKILL the peer that serves this client.
            victim_peer = {network["specs"][1]["port"]: "p-rep1", network["specs"][2]["port"]: "p-rep2"}[
                sub.source.port
            ]
            victim_port = sub.source.port
            peer_process(network["run"], victim_peer).send_signal(signal.SIGKILL)
            before = len(received)
            await wait_until(lambda: len(received) > before + 200, timeout_s=20)
            assert sub.source.port not in (victim_port,)
            assert sub.stats.failovers >= 1

            # 2. SIGKILL the repository and restart it empty.
            repository_process(network["run"]).send_signal(signal.SIGKILL)
            before = len(received)
            await wait_until(lambda: len(received) > before + 200, timeout_s=20)  # data keeps flowing
            network["processes"].pan(
                "repository", "--host", "127.0.0.1", "--port", str(network["repo_port"]), log_name="repo2"
            )
            survivors = [s for s in network["specs"] if s["port"] != victim_port]
            repo_url = f"http://127.0.0.1:{network['repo_port']}"

            async def answering() -> bool:
                try:
                    return (await get_json(f"{repo_url}/health"))[0] == 200
                except OSError:
                    return False

            async def re_registered() -> bool:
                try:
                    known = await repository_streams(network["repo_port"])
                except RepositoryUnavailable:
                    return False
                ports = {p["port"] for p in known.get("SENSOR4", [])}
                return ports == {s["port"] for s in survivors}

            await wait_until(answering, timeout_s=30, interval_s=0.02)  # the new process is up (empty)
            up_at = time.monotonic()
            await wait_until(re_registered, timeout_s=10, interval_s=0.02)
            elapsed_ms = (time.monotonic() - up_at) * 1000
            # Whole again within one refresh period (slack for a loaded test machine's scheduling).
            assert elapsed_ms < REFRESH_MS + 1500, elapsed_ms
            before = len(received)
            await wait_until(lambda: len(received) > before + 200, timeout_s=20)
        finally:
            consumer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await consumer
    # No duplicate and no silent gap across both failures.
    assert received == list(range(received[0], received[0] + len(received)))
    assert received[0] == 0 and sub.stats.missed == 0


async def test_pan_run_stops_everything_on_sigterm(network: dict) -> None:
    run = network["run"]
    children = psutil.Process(run.pid).children()
    assert len(children) == 4  # repository + 3 peers
    run.send_signal(signal.SIGTERM)
    assert run.wait(timeout=30) == 0
    _gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive


async def test_pan_subscribe_cli(network: dict) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "pan",
        "subscribe",
        "SENSOR47",
        "--repository",
        f"127.0.0.1:{network['repo_port']}",
        "--count",
        "25",
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    lines = [orjson.loads(line) for line in out.splitlines()]
    assert proc.returncode == 0
    assert [t["i"] for t in lines] == list(range(25))
    assert all(t["sid"] == 47 for t in lines)
