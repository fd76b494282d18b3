"""Several repositories in one workflow: publishers register with all, subscribers ask any, a restarted one
adopts its replicas' registrations (issue 14, build item 6)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any, cast

import psutil
import pytest

from pan.config.specs import WorkflowError
from pan.http.addresses import free_port, free_ports
from pan.ingest.server import send_lines
from pan.input.subscriber import StreamSubscriber
from pan.launch.launcher import Child, Launcher
from pan.repository.client import Registration, RepositoryClient, RepositoryUnavailable, parse_addresses
from pan.repository.registry import Registry
from pan.repository.server import RepositoryServer
from pan.workflow.parser import on_free_ports, parse_workflow
from tests.conftest import HOST, Processes, WorkerGroup, forwarder, repeater, sensor_row, wait_until

STREAMS = ["SENSOR4"]


def two_repositories(ports: list[int], workers: list[dict[str, Any]], refresh_ms: int = 300) -> dict[str, Any]:
    return {"name": "replicated", "workers": workers,
            "repository": [{"host": HOST, "port": port, "refresh_ms": refresh_ms} for port in ports]}


# --- the workflow and the registry ---------------------------------------------------------------


def test_a_workflow_may_list_several_repositories() -> None:
    workers = [forwarder("F", STREAMS)]
    workflow = parse_workflow(two_repositories([9100, 9101], workers))
    assert [r.port for r in workflow.repositories] == [9100, 9101] and workflow.repository.port == 9100
    assert parse_workflow({**two_repositories([9100], workers), "repository": {"port": 9100}}).replicas == []
    problems = {
        "two repositories on": two_repositories([9100, 9100], workers),
        "same refresh_ms": {**two_repositories([9100, 9101], workers),
                            "repository": [{"port": 9100, "refresh_ms": 300}, {"port": 9101, "refresh_ms": 500}]},
        "at least one": {**two_repositories([], workers)},
    }
    for expected, data in problems.items():
        with pytest.raises(WorkflowError, match=expected):
            parse_workflow(data)
    moved = parse_workflow(on_free_ports(two_repositories([9100, 9101], workers)))
    moved_ports = {r.port for r in moved.repositories}
    assert len(moved_ports) == 2 and moved_ports.isdisjoint({9100, 9101})


def test_addresses_come_as_a_list_or_comma_separated() -> None:
    assert parse_addresses("127.0.0.1:1,127.0.0.1:2") == [(HOST, 1), (HOST, 2)]
    assert parse_addresses((HOST, 3)) == [(HOST, 3)]
    assert parse_addresses([(HOST, 4), "127.0.0.1:5"]) == [(HOST, 4), (HOST, 5)]
    with pytest.raises(ValueError):
        parse_addresses("127.0.0.1:1,nonsense")


def test_adopting_never_shortens_a_lease_of_ones_own() -> None:
    now = [100.0]
    registry = Registry(clock=lambda: now[0])
    registry.publish(["S"], HOST, 9000, False, 0, 6000)
    assert not registry.adopt("S", HOST, 9000, False, 0, 1000)  # ours runs longer
    assert registry.adopt("S", HOST, 9000, False, 0, 9000)  # the replica's runs longer
    assert registry.adopt("T", HOST, 9001, True, 1, 1000)
    now[0] += 5.0
    assert [p.port for p in registry.publishers("S")] == [9000] and registry.publishers("T") == []


# --- in one process -------------------------------------------------------------------------------


@pytest.fixture
async def replicated() -> AsyncIterator[dict[str, Any]]:
    ports = free_ports(2)
    servers = [RepositoryServer(HOST, port, seed=1, replicas=[(HOST, p) for p in ports if p != port])
               for port in ports]
    for server in servers:
        await server.start()
    group = WorkerGroup()
    specs = [forwarder("F", STREAMS), repeater("R", STREAMS, 1)]
    workflow = parse_workflow(two_repositories(ports, specs, refresh_ms=60_000))  # no refresh during the test
    await group.start(workflow)
    state = {"ports": ports, "servers": servers, "specs": specs, "workflow": workflow}
    yield state
    await group.stop_all()
    for server in state["servers"]:
        await server.stop()


async def test_publishers_register_with_every_repository_and_a_restarted_one_adopts_at_once(
        replicated: dict[str, Any]) -> None:
    ports, servers = replicated["ports"], replicated["servers"]
    expected = {s["port"] for s in replicated["specs"]}
    for server in servers:
        assert {p.port for p in server.registry.publishers("SENSOR4")} == expected

    await servers[0].stop()  # restarted empty, on the same port: only the replica can fill it in time
    fresh = RepositoryServer(HOST, ports[0], seed=2, replicas=[(HOST, ports[1])])
    replicated["servers"][0] = fresh
    await fresh.start()
    await wait_until(lambda: {p.port for p in fresh.registry.publishers("SENSOR4")} == expected, timeout_s=60)
    assert fresh.adopted == 2  # a minute before any publisher refreshes


async def test_a_subscriber_asks_the_next_repository_when_one_is_down(replicated: dict[str, Any]) -> None:
    ports, servers = replicated["ports"], replicated["servers"]
    ingest = replicated["specs"][0]["params"]["ingest_port"]
    await send_lines(HOST, ingest, [sensor_row(4, k).encode() for k in range(100)], timeout_s=30)
    await servers[0].stop()  # the first one listed
    async with StreamSubscriber("SENSOR4", [(HOST, p) for p in ports], max_wait_ms=200) as subscriber:
        got: list[int] = []
        while len(got) < 100:
            got += [t["ts"] for t in (await asyncio.wait_for(subscriber.fetch(), 60)).tuples]
    assert got == list(range(100))
    with pytest.raises(RepositoryUnavailable):
        async with RepositoryClient((HOST, ports[0]), timeout_s=5) as gone:
            await gone.streams()


# --- pan run, with a repository killed mid-stream --------------------------------------------------


def children_of(run: Any) -> dict[str, psutil.Process]:
    """``pan run``'s children by role: ``repository PORT`` or the peer's name."""
    named = {}
    for child in psutil.Process(run.pid).children():
        args = child.cmdline()
        named[f"repository {args[args.index('--port') + 1]}" if "repository" in args else args[-1]] = child
    return named


@pytest.mark.process
@pytest.mark.parametrize("killed", [0, 1])
async def test_killing_either_repository_mid_stream_loses_no_tuple(processes: Processes, killed: int) -> None:
    ports = free_ports(2)
    specs = [forwarder("F", STREAMS, peer="p-forwarder", buffer_size=100_000),
             repeater("R1", STREAMS, 1, peer="p-rep1", buffer_size=100_000),
             repeater("R2", STREAMS, 2, peer="p-rep2", buffer_size=100_000)]
    path = processes.write_workflow(two_repositories(ports, specs, refresh_ms=400))
    run = processes.pan("run", str(path), log_name="run")
    for port in ports:
        async with RepositoryClient((HOST, port), timeout_s=30) as repository:
            await repository.wait_for_publishers(STREAMS, 120, publishers=3)
    sent = 0

    async def feed() -> None:
        nonlocal sent
        while True:
            await send_lines(HOST, specs[0]["params"]["ingest_port"],
                             [sensor_row(4, sent + k).encode() for k in range(20)], timeout_s=30)
            sent += 20
            await asyncio.sleep(0.01)

    received: list[int] = []
    forwarder_endpoint = f"{HOST}:{specs[0]['port']}"
    subscriber = StreamSubscriber("SENSOR4", [(HOST, p) for p in ports], exclude=(forwarder_endpoint,),
                                  max_wait_ms=200, page_size=50)

    async def consume() -> None:
        async for batch in subscriber.batches():
            received.extend(t["i"] for t in batch)

    async with subscriber:
        feeder = asyncio.create_task(feed())
        consumer = asyncio.create_task(consume())
        try:
            await wait_until(lambda: len(received) > 200 and subscriber.source is not None, timeout_s=60)
            children = children_of(run)
            children[f"repository {ports[killed]}"].send_signal(signal.SIGKILL)
            # Make the subscriber look up anew: its publisher goes away too.
            in_use = subscriber.source.port
            children[{specs[1]["port"]: "p-rep1", specs[2]["port"]: "p-rep2"}[in_use]].send_signal(signal.SIGKILL)
            before = len(received)
            await wait_until(lambda: len(received) > before + 300, timeout_s=60)
            assert subscriber.source is not None and subscriber.source.port != in_use
        finally:
            for task in (feeder, consumer):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    assert received == list(range(len(received)))  # from 0, no duplicate, no gap
    assert subscriber.stats.missed == 0


async def test_fail_fast_goes_on_while_another_of_the_workflows_repositories_answers(tmp_path: Path) -> None:
    """`pan run --fail-fast` (as `pan replay` runs it) outlives a repository only while a replica answers."""
    ports = free_ports(2)
    workflow = parse_workflow(two_repositories(ports, [forwarder("F", STREAMS, peer="p1")]))
    launcher = Launcher(tmp_path / "workflow.json", workflow, fail_fast=True)

    def ended(name: str, port: int) -> Child:
        served = next(r for r in workflow.repositories if r.port == port) if name == "repository" else None
        return Child(name, cast(Any, None), ["repository", "--host", HOST, "--port", str(port)], repository=served)

    def survivable(child: Child) -> Awaitable[bool]:
        return asyncio.to_thread(launcher._replicas_answer, child)  # blocking HTTP, like the launcher's loop

    survivor = RepositoryServer(HOST, ports[1])
    await survivor.start()
    try:
        assert await survivable(ended("repository", ports[0]))
        assert not await survivable(ended("repository", ports[1]))  # the one that ended is no replica of itself
        assert not await survivable(ended("peer p1", ports[0]))
    finally:
        await survivor.stop()
    assert not await survivable(ended("repository", ports[0]))  # no repository answers


@pytest.mark.process
def test_each_repository_a_launcher_starts_writes_its_own_log_and_stops(tmp_path: Path) -> None:
    ports = free_ports(2)
    workflow = parse_workflow(two_repositories(ports, [forwarder("F", STREAMS, peer="p1")]))
    launcher = Launcher(tmp_path / "workflow.json", workflow, log_dir=tmp_path / "logs")
    try:
        launcher.start()  # returns once both repositories answer
        names = {c.name for c in launcher.children if c.repository is not None}
        assert names == {f"repository {HOST}:{port}" for port in ports}, names
        processes = [c.process for c in launcher.children]
    finally:
        launcher.stop()
    assert all(p.poll() is not None for p in processes)
    for port in ports:  # one log each, and each the log of its own repository
        log = (tmp_path / "logs" / f"repository-{HOST}:{port}.log").read_text()
        listening = [line for line in log.splitlines() if "listening on" in line]
        assert len(listening) == 1 and (listening[0] + " ").find(f"listening on {HOST}:{port} ") >= 0, log


# --- allowed hosts (issue 14, build item 5) ------------------------------------------------------


def test_allowed_hosts_are_the_workflows_own_or_a_list_that_includes_them() -> None:
    workers = [forwarder("F", STREAMS)]
    data = two_repositories([9100, 9101], workers)
    assert parse_workflow({**data, "allowed_hosts": "workflow"}).allowed_hosts == frozenset({HOST})
    assert parse_workflow({**data, "allowed_hosts": [HOST, "198.18.0.9"]}).allowed_hosts == {HOST, "198.18.0.9"}
    assert parse_workflow(data).allowed_hosts is None
    for bad, expected in ((["198.18.0.9"], "leaves out"), ([], "non-empty"), (["a b"], "array of hosts"),
                          ("everyone", "must be")):
        with pytest.raises(WorkflowError, match=expected):
            parse_workflow({**data, "allowed_hosts": bad})


async def test_a_publisher_outside_the_allowed_hosts_is_refused_and_never_pulled_from(
        replicated: dict[str, Any]) -> None:
    ports = replicated["ports"]
    guarded = RepositoryServer(HOST, free_port(), allowed_hosts=frozenset({HOST}))
    await guarded.start()
    try:
        async with RepositoryClient((HOST, guarded.port), timeout_s=30) as client:
            assert not await client.publish(Registration(("SENSOR4",), "198.18.0.66", 9999))
            assert await client.publish(Registration(("SENSOR4",), HOST, replicated["specs"][0]["port"]))
        assert [p.host for p in guarded.registry.publishers("SENSOR4")] == [HOST]
        assert guarded.refused["host_not_allowed"] == 1
    finally:
        await guarded.stop()

    # An open repository that lists a stranger: a subscriber with an allow-list skips it.
    stranger = ("localhost", replicated["specs"][1]["port"])  # the repeater, under a name outside the list
    async with RepositoryClient((HOST, ports[1]), timeout_s=30) as client:
        await client.unpublish(Registration(("SENSOR4",), HOST, replicated["specs"][0]["port"]))
        await client.unpublish(Registration(("SENSOR4",), HOST, replicated["specs"][1]["port"]))
        assert await client.publish(Registration(("SENSOR4",), *stranger, rep=True, lvl=1))
    await replicated["servers"][0].stop()
    strict = StreamSubscriber("SENSOR4", [(HOST, ports[1])], max_wait_ms=100, allowed_hosts=frozenset({HOST}),
                              retry_backoff_s=(0.01, 0.05))
    async with strict:
        fetching = asyncio.create_task(strict.fetch())
        await wait_until(lambda: strict.stats.bad_sources >= 1, timeout_s=60)
        assert strict.source is None  # it never pulled from the stranger
        fetching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await fetching
    async with StreamSubscriber("SENSOR4", [(HOST, ports[1])], max_wait_ms=100) as trusting:
        await asyncio.wait_for(trusting.fetch(), 60)
        assert trusting.source is not None and trusting.source.host == "localhost"
