"""Readers that no gap can stop (issue 10, finding 1): no all-hole page, and a real repeater after a gap.

A page made only of holes used to come back empty while ``wait_beyond`` returned at once, so a repeater
spun at 100% CPU forever.  Both triggers run with the repeater in a real ``pan peer`` process.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from typing import Any

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pan.buffers.ringbuffer import RingBuffer
from pan.repository.server import RepositoryServer
from tests.conftest import HOST, Processes, WorkerGroup, forwarder, make_workflow, repeater, wait_until, workflow_dict
from tests.pan.input.publishers import answer, append

STOP_TIMEOUT_S = 30.0  # generous: the machine may be loaded; a spinning repeater never stops at all


# --- finding 1: the ring buffer never hands out an all-hole page ------------------------------------


def test_holes_do_not_count_toward_the_page_size() -> None:
    buf: RingBuffer[str] = RingBuffer(5000)
    buf.append("a", 0)
    buf.append("b", 1500)  # an upstream gap of 1,499 indices: holes 1..1499
    buf.append("c")
    page = buf.read(0, oldest=1000)
    assert page.indices == [1500, 1501] and page.items == ["b", "c"]
    assert page.missed == 1499
    assert buf.read(-1, oldest=1).indices == [0]
    assert buf.read(0, oldest=1).indices == [1500] and buf.read(0, oldest=1).missed == 1499
    assert buf.read(1500, oldest=1000).missed == 0
    latest = buf.read(-1, latest=2)
    assert latest.indices == [1500, 1501] and latest.missed == 0


@st.composite
def appends(draw: st.DrawFn) -> tuple[int, list[int]]:
    """A capacity and the gap before each append (0: the next index)."""
    capacity = draw(st.integers(1, 30))
    gaps = draw(st.lists(st.one_of(st.just(0), st.just(0), st.integers(1, 40)), max_size=60))
    return capacity, gaps


@settings(max_examples=300, deadline=None)
@given(appends(), st.integers(-1, 400), st.integers(1, 30), st.booleans())
def test_read_with_holes_agrees_with_a_model(
    case: tuple[int, list[int]], after: int, limit: int, use_latest: bool
) -> None:
    capacity, gaps = case
    buf: RingBuffer[int] = RingBuffer(capacity)
    held: dict[int, int] = {}
    first = next_index = 0
    for gap in gaps:
        index = next_index + gap
        buf.append(index * 7, index if gap else None)
        if index - next_index >= capacity:
            first = index
        held[index] = index * 7
        next_index = index + 1
        first = max(first, next_index - capacity)
    real = [i for i in sorted(held) if first <= i and i > after]
    wanted = real[-limit:] if use_latest else real[:limit]
    page = buf.read(after, latest=limit) if use_latest else buf.read(after, oldest=limit)
    assert page.indices == wanted
    assert page.items == [held[i] for i in wanted]
    # Missed: overwritten before the read, plus holes between ``after`` and the returned items (all of them
    # when the page is not full); holes beyond a full page are the next page's, skipped ones with `latest` nobody's.
    overwritten = max(0, min(first, next_index) - (after + 1))
    start = max(after + 1, first)
    if not wanted:
        span = range(0)
    elif use_latest:
        span = range(wanted[0] if len(wanted) == limit else start, next_index)
    else:
        span = range(start, wanted[-1] + 1)
    holes = sum(1 for i in span if i not in held)
    assert page.missed == overwritten + holes
    # The property the repeater and every HTTP client rely on: never an empty page while newer items exist.
    if next_index - 1 > after:
        assert page.items


# --- finding 1: a real repeater after a gap of >= 1,000 tuples ---------------------------------------


async def tuples_from(url: str, **params: Any) -> dict[str, Any] | None:
    """A `/data` answer that holds tuples, or None."""
    body = await answer(f"{url}/data", s="S", **params)
    return body if body and body["tuples"] else None


def peer_workflow(repo_port: int, forwarder_buffer: int) -> dict[str, Any]:
    return workflow_dict(
        repo_port,
        [
            forwarder("F", ["S"], buffer_size=forwarder_buffer, peer="pf"),
            repeater("R", ["S"], 1, buffer_size=10_000, peer="pr"),
        ],
    )


async def start_repeater_peer(processes: Processes, data: dict[str, Any]) -> tuple[subprocess.Popen[bytes], str]:
    path = processes.write_workflow(data)
    proc = processes.pan("peer", str(path), "--name", "pr", log_name="repeater")
    url = f"http://{HOST}:{data['workers'][1]['port']}"
    await wait_until(lambda: answer(f"{url}/health"), timeout_s=60)
    return proc, url


async def assert_repeater_alive_and_idle(proc: subprocess.Popen[bytes], url: str) -> None:
    """Answers HTTP, burns no CPU while idle, stops on SIGTERM."""
    assert await answer(f"{url}/health") is not None
    cpu = psutil.Process(proc.pid)
    before = sum(cpu.cpu_times()[:2])
    await asyncio.sleep(1.0)  # a measurement window, not a wait for a condition
    used = sum(cpu.cpu_times()[:2]) - before
    assert used < 0.5, f"idle repeater used {used:.2f} s of CPU in 1 s"
    proc.send_signal(signal.SIGTERM)
    await wait_until(lambda: proc.poll() is not None, timeout_s=STOP_TIMEOUT_S)
    assert proc.returncode == 0


@pytest.mark.process
async def test_repeater_started_after_the_forwarder_passed_index_1000(
    repository: RepositoryServer, workers: WorkerGroup, processes: Processes
) -> None:
    data = peer_workflow(repository.port, forwarder_buffer=100)
    (producer,) = await workers.start(make_workflow(repository.port, data["workers"]), names=["F"])
    append(producer, "S", 1500)  # the forwarder now holds 1400..1499 only
    assert producer.outputs["S"].buffer.first == 1400
    proc, url = await start_repeater_peer(processes, data)

    # A plain HTTP client right before the run of holes 0..1399 gets the tuples after it, and the gap as missed.
    body = await wait_until(lambda: tuples_from(url, i=-1, n=10), timeout_s=60)
    assert [t["i"] for t in body["tuples"]] == list(range(1400, 1410))
    assert body["missed"] == 1400
    append(producer, "S", 10)
    body = await wait_until(lambda: tuples_from(url, i=1499, w=1000), timeout_s=60)
    assert [t["i"] for t in body["tuples"]][:1] == [1500]
    streams = await answer(f"{url}/streams")
    assert streams is not None and streams["inputs"]["S"]["missed"] == 1400
    await assert_repeater_alive_and_idle(proc, url)


@pytest.mark.process
async def test_repeater_paused_while_the_forwarder_overwrote_1000_tuples_beyond_it(
    repository: RepositoryServer, workers: WorkerGroup, processes: Processes
) -> None:
    data = peer_workflow(repository.port, forwarder_buffer=200)
    (producer,) = await workers.start(make_workflow(repository.port, data["workers"]), names=["F"])
    proc, url = await start_repeater_peer(processes, data)
    append(producer, "S", 100)

    async def repeated(last: int) -> bool:
        body = await answer(f"{url}/data", s="S", l=1)
        return bool(body and body["last"] == last)

    await wait_until(lambda: repeated(99), timeout_s=60)
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        append(producer, "S", 3000)  # 100..2899 overwritten before the repeater could pull them
        assert producer.outputs["S"].buffer.first == 2900
    finally:
        os.kill(proc.pid, signal.SIGCONT)
    await wait_until(lambda: repeated(3099), timeout_s=60)
    body = await answer(f"{url}/data", s="S", i=99, n=5)
    assert body is not None
    assert [t["i"] for t in body["tuples"]] == [2900, 2901, 2902, 2903, 2904]
    assert body["missed"] == 2800
    streams = await answer(f"{url}/streams")
    assert streams is not None and streams["inputs"]["S"]["missed"] == 2800
    append(producer, "S", 5)
    await wait_until(lambda: repeated(3104), timeout_s=60)
    await assert_repeater_alive_and_idle(proc, url)
