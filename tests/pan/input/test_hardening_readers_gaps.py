"""Readers that a pause cannot fool (issue 10, finding 9): gaps and resets are visible in a client's output,
as markers of a ``StreamSubscriber`` and as lines of `pan subscribe`."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from pan.input.local import LocalPublishers
from pan.input.subscriber import StreamSubscriber
from pan.repository.server import RepositoryServer
from tests.conftest import HOST, ROOT, WorkerGroup, forwarder, make_workflow
from tests.pan.input.publishers import append


@pytest.fixture(params=["http", "local"])
async def peer_workers(request: pytest.FixtureRequest) -> AsyncIterator[WorkerGroup]:
    group = WorkerGroup(LocalPublishers() if request.param == "local" else None)
    yield group
    await group.stop_all()


async def read_until(sub: StreamSubscriber, last_index: int, out: list[dict[str, Any]]) -> None:
    async def run() -> None:
        async for batch in sub.batches():
            out.extend(batch)
            if any(item.get("i") == last_index for item in batch):
                return

    await asyncio.wait_for(run(), 30)


def tuples(first: int, last: int) -> list[int]:
    return list(range(first, last + 1))


def shape(lines: list[dict[str, Any]]) -> list[Any]:
    """Tuples as their index, markers as they are."""
    return [line.get("i", line) for line in lines]


async def test_a_paused_subscriber_gets_a_gap_marker_with_exact_bounds(
    repository: RepositoryServer, peer_workers: WorkerGroup
) -> None:
    (producer,) = await peer_workers.start(make_workflow(repository.port, [forwarder("F", ["S"], buffer_size=50)]))
    append(producer, "S", 40)
    out: list[dict[str, Any]] = []
    async with StreamSubscriber(
        "S", (HOST, repository.port), page_size=10, max_wait_ms=100, gaps=True, local=peer_workers.local
    ) as sub:
        await read_until(sub, 29, out)  # pages of 10: exactly 0..29
        append(producer, "S", 190)  # the subscriber does not read: 30..179 are overwritten
        await read_until(sub, 229, out)
    assert shape(out) == [*tuples(0, 29), {"gap": {"from": 30, "to": 179}}, *tuples(180, 229)]
    assert (sub.stats.received, sub.stats.missed, sub.stats.gaps) == (80, 150, 1)


async def test_gap_markers_are_opt_in(repository: RepositoryServer, peer_workers: WorkerGroup) -> None:
    (producer,) = await peer_workers.start(make_workflow(repository.port, [forwarder("F", ["S"], buffer_size=5)]))
    append(producer, "S", 20)
    out: list[dict[str, Any]] = []
    async with StreamSubscriber("S", (HOST, repository.port), max_wait_ms=100, local=peer_workers.local) as sub:
        await read_until(sub, 19, out)
    assert shape(out) == tuples(15, 19) and sub.stats.missed == 15


async def test_a_producer_restart_is_a_reset_marker(repository: RepositoryServer, peer_workers: WorkerGroup) -> None:
    wf = make_workflow(repository.port, [forwarder("F", ["S"])])
    (producer,) = await peer_workers.start(wf)
    append(producer, "S", 5)
    out: list[dict[str, Any]] = []
    async with StreamSubscriber(
        "S", (HOST, repository.port), max_wait_ms=100, gaps=True, local=peer_workers.local
    ) as sub:
        await read_until(sub, 4, out)
        await peer_workers.stop_all()
        (restarted,) = await peer_workers.start(wf)
        append(restarted, "S", 3)
        await read_until(sub, 2, out)
    reset = {"reset": {"reason": f"producer restarted (epoch {restarted.epoch})", "epoch": restarted.epoch,
                       "position": -1}}
    assert shape(out) == [*tuples(0, 4), reset, *tuples(0, 2)]


async def read_lines(stream: asyncio.StreamReader, out: list[dict[str, Any]], until_index: int) -> None:
    while not any(line.get("i") == until_index for line in out):
        line = await asyncio.wait_for(stream.readline(), 60)
        assert line, f"pan subscribe ended early after {shape(out)}"
        out.append(orjson.loads(line))


async def pan_subscribe(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pan", "subscribe", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, cwd=ROOT,
    )


@pytest.mark.process
async def test_pan_subscribe_writes_a_gap_line_where_a_pause_lost_tuples(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    (producer,) = await workers.start(make_workflow(repository.port, [forwarder("F", ["S"], buffer_size=50)]))
    append(producer, "S", 30)
    proc = await pan_subscribe(
        "S", "--repository", f"{HOST}:{repository.port}", "--page-size", "10", "--wait-ms", "200", "--count", "80"
    )
    assert proc.stdout is not None
    out: list[dict[str, Any]] = []
    try:
        await read_lines(proc.stdout, out, 29)
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            append(producer, "S", 300)  # 30..279 are overwritten while the client is paused
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        rest = await asyncio.wait_for(proc.stdout.read(), 60)
        assert await asyncio.wait_for(proc.wait(), 60) == 0  # --count 80 tuples, the gap line not counted
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    out += [orjson.loads(line) for line in rest.splitlines()]
    assert shape(out) == [*tuples(0, 29), {"gap": {"from": 30, "to": 279}}, *tuples(280, 329)]


@pytest.mark.process
async def test_pan_subscribe_gaps_skip_omits_the_gap_lines(repository: RepositoryServer, workers: WorkerGroup) -> None:
    (producer,) = await workers.start(make_workflow(repository.port, [forwarder("F", ["S"], buffer_size=50)]))
    append(producer, "S", 100)
    address = f"{HOST}:{repository.port}"
    cases = (([], [{"gap": {"from": 0, "to": 49}}, *tuples(50, 99)]), (["--gaps", "skip"], tuples(50, 99)))
    for extra, expected in cases:
        proc = await pan_subscribe("S", "--repository", address, "--count", "50", *extra)
        stdout, _ = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0
        assert shape([orjson.loads(line) for line in stdout.splitlines()]) == expected
