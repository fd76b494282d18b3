"""RepositoryClient against a real repository on loopback: publish, leases, lookups, waiting for publishers."""

from __future__ import annotations

import asyncio
import logging

import pytest

from pan.http.addresses import free_port
from pan.repository.client import (
    Lease,
    NoPublisher,
    PublishersMissing,
    Registration,
    RepositoryClient,
    RepositoryUnavailable,
    Source,
)
from pan.repository.server import RepositoryServer
from tests.conftest import HOST, wait_until


async def test_publish_lookup_streams_unpublish(repository: RepositoryServer) -> None:
    registration = Registration(("A", "B"), HOST, 9001, rep=True, lvl=2, ttl_ms=5000)
    async with RepositoryClient((HOST, repository.port)) as client:
        assert await client.publish(registration)
        assert await client.lookup("A") == Source(HOST, 9001, True, 2)
        with pytest.raises(NoPublisher) as refused:
            await client.lookup("A", norep=True)
        assert refused.value.status == 404
        with pytest.raises(NoPublisher):
            await client.lookup("A", exclude=[f"{HOST}:9001"])
        assert await client.streams() == {s: [{"host": HOST, "port": 9001, "rep": True, "lvl": 2}] for s in "AB"}
        assert await client.unpublish(registration)
        assert await client.streams() == {}


async def test_an_unreachable_repository_is_reported_not_raised_as_network_errors() -> None:
    async with RepositoryClient((HOST, free_port()), timeout_s=5) as client:
        assert not await client.publish(Registration(("A",), HOST, 9001))
        with pytest.raises(RepositoryUnavailable):
            await client.lookup("A")
        with pytest.raises(PublishersMissing):
            await client.wait_for_publishers(["A"], timeout_s=0.5)


async def test_wait_for_publishers_counts_producers_and_repeaters(repository: RepositoryServer) -> None:
    async with RepositoryClient((HOST, repository.port)) as client:
        await client.publish(Registration(("A", "B"), HOST, 9001, rep=True, lvl=1))
        with pytest.raises(PublishersMissing):
            await client.wait_for_publishers(["A", "B"], timeout_s=0.5, producers=1)
        waiting = asyncio.create_task(client.wait_for_publishers(["A", "B"], timeout_s=30, publishers=2, producers=1))
        await client.publish(Registration(("A",), HOST, 9000))
        await asyncio.sleep(0.5)
        assert not waiting.done()  # B has no producer yet
        await client.publish(Registration(("B",), HOST, 9000))
        await asyncio.wait_for(waiting, 30)
        await client.wait_for_publishers(["A"], timeout_s=1, repeaters=1)
        with pytest.raises(PublishersMissing):
            await client.wait_for_publishers(["A"], timeout_s=0.5, repeaters=2)


async def test_a_released_lease_publishes_no_more(repository: RepositoryServer) -> None:
    """A refresh still due when the owner releases (its keep task not cancelled yet) cannot undo the release."""
    async with RepositoryClient((HOST, repository.port)) as client:
        lease = Lease(client, Registration(("S",), HOST, 9005, ttl_ms=3000), refresh_s=0.1,
                      log=logging.getLogger("test"))
        await lease.publish()
        assert "S" in await client.streams()
        await lease.release()
        await lease.publish()  # what the keep task would do next
        assert await client.streams() == {}


async def test_a_lease_survives_a_repository_restart(repository: RepositoryServer) -> None:
    port = repository.port
    registration = Registration(("S",), HOST, 9005, ttl_ms=3000)
    async with RepositoryClient((HOST, port)) as client:
        lease = Lease(client, registration, refresh_s=0.1, log=logging.getLogger("test"))
        await lease.publish()
        assert lease.reachable
        keeping = asyncio.create_task(lease.keep())
        try:
            await repository.stop()
            await wait_until(lambda: not lease.reachable, timeout_s=10)
            restarted = RepositoryServer(HOST, port)
            await restarted.start()
            try:
                await client.wait_for_publishers(["S"], timeout_s=10)
                await wait_until(lambda: lease.reachable, timeout_s=10)  # the refresh's answer may still be on its way
                await lease.release()
                assert await client.streams() == {}
            finally:
                await restarted.stop()
        finally:
            keeping.cancel()
            await asyncio.gather(keeping, return_exceptions=True)
