"""Readers that no gap, bad page, hostile answer or pause can stop (issue 10, findings 1, 2, 3 and 9).

* Finding 1: a page made only of holes used to come back empty while
  ``wait_beyond`` returned at once, so a repeater spun at 100% CPU forever.
  Both triggers run with the repeater in a real ``pan peer`` process.
* Finding 2 (readers' half): an undecodable page is reported with the
  publisher's address and failed over, never retried silently.
* Finding 3 (clients' half): a `/subscribe` answer decides where requests go,
  so it is validated and URLs are built from parts.
* Finding 9: gaps (and resets) are visible in a client's output.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import psutil
import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st

from pan.buffers.ringbuffer import RingBuffer
from pan.http.web import HttpServer
from pan.input.local import LocalPublishers
from pan.input.subscriber import StreamSubscriber
from pan.repository.client import parse_address
from pan.repository.server import RepositoryServer
from pan.worker.worker import Worker
from tests.conftest import (
    HOST,
    ROOT,
    Processes,
    WorkerGroup,
    forwarder,
    get_json,
    make_workflow,
    repeater,
    wait_until,
    workflow_dict,
)
from tests.support import prometheus

STOP_TIMEOUT_S = 30.0  # generous: the machine may be loaded; a spinning repeater never stops at all


def append(worker: Worker, stream: str, count: int) -> None:
    """``count`` tuples in one synchronous go: nothing else runs on this event loop meanwhile."""
    out = worker.outputs[stream]
    for _ in range(count):
        out.append({"ts": 10 * out.buffer.next_index})


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


async def answer(url: str, **params: Any) -> dict[str, Any] | None:
    """A worker's JSON answer, or None if it does not answer (in time)."""
    try:
        status, body = await get_json(url, **params)
    except (aiohttp.ClientError, OSError, TimeoutError):
        return None
    return body if status == 200 else None


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


# --- finding 2: an undecodable page is reported and failed over --------------------------------------

POISON = b'{"i":0,"ts":1,"x":' + b"9" * 400 + b"}"


class FakePublisher:
    """A real aiohttp server answering `/data` with a fixed body, counting every request by path."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.requests: list[str] = []
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.server = HttpServer(app, HOST, 0)

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(request.path)
        return web.Response(body=self.body, content_type="application/json")

    @property
    def port(self) -> int:
        return self.server.port


@contextlib.asynccontextmanager
async def serving(body: bytes) -> AsyncIterator[FakePublisher]:
    publisher = FakePublisher(body)
    await publisher.server.start()
    try:
        yield publisher
    finally:
        await publisher.server.stop()


def page(tuples_json: bytes, last: int = 0) -> bytes:
    head = b'{"status":"ok","stream":"S","tuples":['
    return head + tuples_json + b'],"first":0,"last":%d,"missed":0,"meta":{}}' % last


@pytest.mark.parametrize(
    "body",
    [
        page(POISON),  # "number is infinity when parsed as double"
        page(b'{"ts":1}'),  # a tuple without an index
        page(b'{"i":"0","ts":1}'),  # an index that is not an integer
        page(b"[1,2]"),  # a tuple that is not an object
        b'{"status":"ok","tuples":{"i":0},"last":0}',  # tuples that are not a list
        b"not json at all",
    ],
    ids=["400-digits", "no-index", "string-index", "not-an-object", "tuples-not-a-list", "not-json"],
)
async def test_a_bad_page_is_reported_with_the_publishers_address_and_failed_over(
    body: bytes, repository: RepositoryServer, workers: WorkerGroup, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pan.input.subscriber")
    wf = make_workflow(repository.port, [forwarder("F", ["S"])])
    async with serving(body) as poisoned:
        status, _ = await get_json(f"http://{HOST}:{repository.port}/publish", s="S", h=HOST, p=poisoned.port)
        assert status == 200
        async with StreamSubscriber(
            "S", (HOST, repository.port), max_wait_ms=100, retry_backoff_s=(0.01, 0.05)
        ) as sub:
            got: list[dict[str, Any]] = []

            async def consume() -> None:
                async for batch in sub.batches():
                    got.extend(batch)

            task = asyncio.create_task(consume())
            try:
                await wait_until(lambda: sub.stats.decode_errors >= 3 or task.done())
                assert not task.done(), "the subscriber gave up instead of failing over"
                # Every request the bad publisher saw is accounted for: no silent retry loop.
                assert sub.stats.decode_errors <= len(poisoned.requests) <= sub.stats.decode_errors + 1  # +1 in flight
                (producer,) = await workers.start(wf)  # a good publisher of the same stream appears
                append(producer, "S", 20)
                await wait_until(lambda: len(got) >= 20 or task.done(), timeout_s=20)
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    assert [t["i"] for t in got] == list(range(20))
    assert sub.stats.failovers >= sub.stats.decode_errors >= 3
    warnings = [r.getMessage() for r in caplog.records if "cannot be used" in r.getMessage()]
    assert warnings and all(f"{HOST}:{poisoned.port}" in w for w in warnings)
    assert len(warnings) < sub.stats.decode_errors  # rate-limited: one line, the rest counted


async def test_a_workers_pull_shows_undecodable_pages_in_streams_and_metrics(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    """An operator sees a poisoned upstream on the pulling worker, not only in its log."""
    async with serving(page(POISON)) as poisoned:
        status, _ = await get_json(f"http://{HOST}:{repository.port}/publish", s="S", h=HOST, p=poisoned.port)
        assert status == 200
        wf = make_workflow(repository.port, [forwarder("F", ["S"]), repeater("R", ["S"], 1)])
        (rep,) = await workers.start(wf, names=["R"])  # the poisoned publisher is S's only one
        url = f"http://{HOST}:{rep.server.port}"

        async def decode_errors() -> int:
            _, info = await get_json(f"{url}/streams")
            return info["inputs"]["S"]["decode_errors"]

        await wait_until(lambda: decode_errors(), timeout_s=30)
        async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as response:
            text = await response.text()
        assert prometheus.value(text, "pan_input_decode_errors_total", input="S") >= 1


# --- finding 3: clients build URLs from validated parts ----------------------------------------------


class HostileRepository:
    """Answers `/subscribe` with the given bodies in turn, then repeats the last one."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.asked = 0
        app = web.Application()
        app.router.add_get("/subscribe", self.handle)
        self.server = HttpServer(app, HOST, 0)

    async def handle(self, request: web.Request) -> web.Response:
        body = self.answers[min(self.asked, len(self.answers) - 1)]
        self.asked += 1
        return web.Response(body=orjson.dumps(body), content_type="application/json")


async def test_hostile_subscribe_answers_never_reach_anything_but_data() -> None:
    async with serving(page(b'{"i":0,"ts":1}')) as target:
        port = target.port
        bad: list[Any] = [
            {"host": f"{HOST}:{port}/admin/delete-everything?confirm=yes#", "port": port},
            {"host": f"{HOST}/admin/delete-everything?confirm=yes#", "port": port},
            {"host": f"{HOST}:{port}/admin/delete-everything?confirm=yes#", "port": f"{port}"},
            {"host": HOST, "port": f"{port}/admin/delete-everything"},
            {"host": f"admin@{HOST}", "port": port},
            {"host": f"{HOST}#frag", "port": port},
            {"host": f"{HOST} ", "port": port},
            {"host": f"{HOST}\r\nX-Evil: 1", "port": port},
            {"host": [HOST], "port": port},
            {"host": {"h": HOST}, "port": port},
            {"host": HOST, "port": 0},
            {"host": HOST, "port": 70000},
            {"host": HOST, "port": True},
            {"host": HOST, "port": port, "rep": "yes"},
            {"host": HOST, "port": port, "lvl": "1"},
            ["not", "an", "object"],
        ]
        hostile = HostileRepository([*bad, {"host": HOST, "port": port, "rep": False, "lvl": 0}])
        await hostile.server.start()
        try:
            async with StreamSubscriber(
                "S", (HOST, hostile.server.port), max_wait_ms=0, retry_backoff_s=(0.001, 0.01)
            ) as sub:
                fetch = await asyncio.wait_for(sub.fetch(), 30)
        finally:
            await hostile.server.stop()
    assert [t["i"] for t in fetch.tuples] == [0]
    assert target.requests == ["/data"]  # nothing else ever reached the target port
    assert sub.stats.bad_sources == len(bad) and hostile.asked == len(bad) + 1


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1:99999",
        "127.0.0.1:0",
        "evil.example/admin:80",
        "user@127.0.0.1:80",
        "a b:80",
        "127.0.0.1:٣٣",  # Arabic-Indic digits: str.isdigit() says yes
        "127.0.0.1",
        ("127.0.0.1/x", 80),
        ("127.0.0.1", 0),
    ],
)
def test_repository_addresses_are_validated(address: Any) -> None:
    with pytest.raises(ValueError):
        parse_address(address)


def test_good_repository_addresses() -> None:
    assert parse_address("127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert parse_address(":8080") == ("127.0.0.1", 8080)
    assert parse_address("[::1]:8080") == ("::1", 8080)
    assert parse_address("repo.example.org:80") == ("repo.example.org", 80)


@pytest.mark.process
def test_pan_subscribe_refuses_a_bad_repository_address() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pan", "subscribe", "S", "--repository", "127.0.0.1:80/admin?x=1#:80"],
        capture_output=True, cwd=ROOT, timeout=60,
    )
    assert done.returncode == 2
    assert b"--repository" in done.stderr and b"Traceback" not in done.stderr


# --- finding 9: gaps and resets are visible in the output --------------------------------------------


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
