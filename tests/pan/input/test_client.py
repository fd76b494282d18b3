"""The subscriber client: positions, reset policy, failover, gap reporting.

Every test runs twice: over HTTP, and with the workers and the subscriber in
one peer's in-process directory (`pan.input.local`), which must behave the same.
"""

import asyncio
from collections.abc import AsyncIterator

import pytest

from pan.input.local import LocalPublishers
from pan.input.subscriber import StreamSubscriber
from pan.repository.server import RepositoryServer
from pan.worker.worker import Worker
from tests.conftest import WorkerGroup, forwarder, make_workflow, repeater, wait_until


@pytest.fixture(params=["http", "local"])
async def workers(request: pytest.FixtureRequest) -> AsyncIterator[WorkerGroup]:
    group = WorkerGroup(LocalPublishers() if request.param == "local" else None)
    yield group
    await group.stop_all()


def append(worker: Worker, stream: str, count: int) -> None:
    for _ in range(count):
        out = worker.outputs[stream]
        out.append({"ts": 10 * out.buffer.next_index})


async def take(sub: StreamSubscriber, count: int, timeout_s: float = 10.0) -> list[dict]:
    got: list[dict] = []

    async def run() -> None:
        async for batch in sub.batches():
            got.extend(batch)
            if len(got) >= count:
                return

    await asyncio.wait_for(run(), timeout_s)
    return got


async def test_failover_between_publishers_without_duplicates(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    wf = make_workflow(
        repository.port, [forwarder("F", ["S"]), repeater("R1", ["S"], 1), repeater("R2", ["S"], 1)]
    )
    producer, r1, r2 = await workers.start(wf)
    append(producer, "S", 100)
    await wait_until(lambda: r1.outputs["S"].buffer.last == 99 and r2.outputs["S"].buffer.last == 99)
    address = ("127.0.0.1", repository.port)
    async with StreamSubscriber("S", address, exclude=(producer.endpoint,), max_wait_ms=100, page_size=30,
                                local=workers.local) as sub:
        first = await take(sub, 50)
        used = r1 if sub.source.port == r1.server.port else r2
        other = r2 if used is r1 else r1
        await used.stop()
        workers.workers.remove(used)
        append(producer, "S", 50)
        rest = await take(sub, 150 - len(first))
    indices = [t["i"] for t in first + rest]
    assert indices == list(range(150))  # no duplicate, no gap
    assert sub.stats.failovers >= 1 and sub.stats.missed == 0
    assert sub.source.port == other.server.port
    in_process = workers.local is not None
    assert sub.source_is_local == in_process
    assert other.api.describe()["inputs"]["S"]["source"]["local"] == in_process  # the repeater's own pull


async def test_producer_restart_applies_the_reset_policy(repository: RepositoryServer, workers: WorkerGroup) -> None:
    spec = forwarder("F", ["S"])
    wf = make_workflow(repository.port, [spec])
    (producer,) = await workers.start(wf)
    append(producer, "S", 20)
    async with StreamSubscriber("S", ("127.0.0.1", repository.port), max_wait_ms=100, local=workers.local) as sub:
        assert [t["i"] for t in await take(sub, 20)] == list(range(20))
        old_epoch = sub.epoch
        await workers.stop_all()
        (restarted,) = await workers.start(wf)
        append(restarted, "S", 5)
        again = await take(sub, 5)
    assert [t["i"] for t in again] == [0, 1, 2, 3, 4]
    assert sub.stats.resets == 1 and sub.epoch == restarted.epoch != old_epoch


async def test_position_beyond_the_producers_end_is_reset(repository: RepositoryServer, workers: WorkerGroup) -> None:
    (producer,) = await workers.start(make_workflow(repository.port, [forwarder("F", ["S"])]))
    append(producer, "S", 5)
    async with StreamSubscriber(
        "S", ("127.0.0.1", repository.port), start=1000, max_wait_ms=50, local=workers.local
    ) as sub:
        got = await take(sub, 5)
    assert [t["i"] for t in got] == [0, 1, 2, 3, 4]
    assert sub.stats.resets == 1


async def test_start_latest_skips_the_backlog(repository: RepositoryServer, workers: WorkerGroup) -> None:
    (producer,) = await workers.start(make_workflow(repository.port, [forwarder("F", ["S"])]))
    append(producer, "S", 10)
    async with StreamSubscriber("S", ("127.0.0.1", repository.port), start="latest", max_wait_ms=100,
                                local=workers.local) as sub:
        await sub.fetch()  # positions at the newest tuple
        append(producer, "S", 3)
        got = await take(sub, 3)
    assert [t["i"] for t in got] == [10, 11, 12]


async def test_overwritten_tuples_are_reported_not_hidden(repository: RepositoryServer, workers: WorkerGroup) -> None:
    (producer,) = await workers.start(make_workflow(repository.port, [forwarder("F", ["S"], buffer_size=5)]))
    append(producer, "S", 20)
    async with StreamSubscriber("S", ("127.0.0.1", repository.port), max_wait_ms=50, local=workers.local) as sub:
        got = await take(sub, 5)
    assert [t["i"] for t in got] == [15, 16, 17, 18, 19]
    assert (sub.stats.missed, sub.stats.gaps) == (15, 1)


async def test_waits_for_a_publisher_that_appears_later(repository: RepositoryServer, workers: WorkerGroup) -> None:
    wf = make_workflow(repository.port, [forwarder("F", ["S"])])
    async with StreamSubscriber(
        "S", ("127.0.0.1", repository.port), max_wait_ms=50, retry_backoff_s=(0.01, 0.05), local=workers.local
    ) as sub:
        pending = asyncio.create_task(take(sub, 3))
        await asyncio.sleep(0.2)
        assert not pending.done()
        (producer,) = await workers.start(wf)
        append(producer, "S", 3)
        assert [t["i"] for t in await pending] == [0, 1, 2]
