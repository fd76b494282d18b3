"""Contract tests for the repository's REST endpoints (DESIGN §4)."""

import asyncio

import pytest

from pan.repository.server import RepositoryServer
from tests.conftest import get_json


def url(repo: RepositoryServer, path: str) -> str:
    return f"http://127.0.0.1:{repo.port}/{path}"


async def publish(repo: RepositoryServer, stream: str, port: int, **extra: object) -> tuple[int, object]:
    return await get_json(url(repo, "publish"), s=stream, h="127.0.0.1", p=port, **extra)


async def test_publish_subscribe_streams_unpublish(repository: RepositoryServer) -> None:
    assert await publish(repository, "S1", 9001) == (200, {"status": "ok", "lease_ms": 15000})
    status, answer = await get_json(url(repository, "subscribe"), s="S1")
    assert status == 200
    assert answer == {"status": "ok", "stream": "S1", "host": "127.0.0.1", "port": 9001, "rep": False, "lvl": 0}
    status, streams = await get_json(url(repository, "streams"))
    assert streams == {"streams": {"S1": [{"host": "127.0.0.1", "port": 9001, "rep": False, "lvl": 0}]}, "next": None}
    assert (await get_json(url(repository, "unpublish"), s="S1", h="127.0.0.1", p=9001))[0] == 200
    status, answer = await get_json(url(repository, "subscribe"), s="S1")
    assert status == 404 and answer["status"] == "error" and "S1" in answer["error"]


async def test_subscribe_filters_repeaters_and_levels(repository: RepositoryServer) -> None:
    await publish(repository, "S", 9000)
    await publish(repository, "S", 9001, rep="true", lvl=1)
    await publish(repository, "S", 9002, rep="true", lvl=2)
    seen: dict[str, set[int]] = {"all": set(), "norep": set(), "lvl1": set(), "lvl2": set()}
    for _ in range(60):
        seen["all"].add((await get_json(url(repository, "subscribe"), s="S"))[1]["port"])
        seen["norep"].add((await get_json(url(repository, "subscribe"), s="S", norep="true"))[1]["port"])
        seen["lvl1"].add((await get_json(url(repository, "subscribe"), s="S", lvl=1))[1]["port"])
        seen["lvl2"].add((await get_json(url(repository, "subscribe"), s="S", lvl=2))[1]["port"])
    assert seen == {"all": {9000, 9001, 9002}, "norep": {9000}, "lvl1": {9000}, "lvl2": {9000, 9001}}
    status, _ = await get_json(url(repository, "subscribe"), s="S", lvl=0)
    assert status == 404  # nothing is below level 0


async def test_subscribe_can_exclude_failed_publishers(repository: RepositoryServer) -> None:
    await publish(repository, "S", 9000)
    await publish(repository, "S", 9001, rep="true", lvl=1)
    for _ in range(20):
        assert (await get_json(url(repository, "subscribe"), s="S", exclude="127.0.0.1:9000"))[1]["port"] == 9001
    status, _ = await get_json(url(repository, "subscribe"), s="S", exclude="127.0.0.1:9000,127.0.0.1:9001")
    assert status == 404


@pytest.mark.parametrize(
    ("path", "params", "needle"),
    [
        ("publish", {"h": "127.0.0.1", "p": 1}, "'s'"),
        ("publish", {"s": "S", "p": 1}, "'h'"),
        ("publish", {"s": "S", "h": "x"}, "'p'"),
        ("publish", {"s": "S", "h": "x", "p": "eighty"}, "integer"),
        ("publish", {"s": "S", "h": "x", "p": 70000}, "<= 65535"),
        ("publish", {"s": "S", "h": "x", "p": 1, "rep": "maybe"}, "true or false"),
        ("publish", {"s": "S", "h": "x", "p": 1, "lvl": 2}, "level 0"),
        ("publish", {"s": "S", "h": "x", "p": 1, "rep": "true", "lvl": 0}, "level >= 1"),
        ("publish", {"s": "S", "h": "x", "p": 1, "ttl": -5}, "'ttl'"),
        ("subscribe", {}, "'s'"),
        ("subscribe", {"s": "S", "lvl": "x"}, "'lvl'"),
        ("subscribe", {"s": "S", "exclude": "nonsense"}, "exclude"),
        ("unpublish", {"s": "S", "h": "x"}, "'p'"),
    ],
)
async def test_bad_parameters_get_400(repository: RepositoryServer, path: str, params: dict, needle: str) -> None:
    status, answer = await get_json(url(repository, path), **params)
    assert status == 400
    assert answer["status"] == "error" and needle in answer["error"]


async def test_unknown_stream_and_unknown_publisher_get_404(repository: RepositoryServer) -> None:
    status, answer = await get_json(url(repository, "subscribe"), s="NOPE")
    assert status == 404 and "NOPE" in answer["error"]
    status, _ = await get_json(url(repository, "unpublish"), s="NOPE", h="127.0.0.1", p=1)
    assert status == 404


async def test_registrations_expire_unless_refreshed(repository: RepositoryServer) -> None:
    await publish(repository, "SHORT", 9000, ttl=150)
    await publish(repository, "LONG", 9001, ttl=60000)
    assert (await get_json(url(repository, "subscribe"), s="SHORT"))[0] == 200
    await asyncio.sleep(0.1)
    await publish(repository, "SHORT", 9000, ttl=150)  # refresh
    await asyncio.sleep(0.1)
    assert (await get_json(url(repository, "subscribe"), s="SHORT"))[0] == 200
    await asyncio.sleep(0.2)
    assert (await get_json(url(repository, "subscribe"), s="SHORT"))[0] == 404
    assert list((await get_json(url(repository, "streams")))[1]["streams"]) == ["LONG"]


async def test_debug_and_health(repository: RepositoryServer) -> None:
    await publish(repository, "S<1>", 9000)
    status, page = await get_json(url(repository, "debug"))
    assert status == 200 and "S&lt;1&gt;" in page and "127.0.0.1:9000" in page
    assert await get_json(url(repository, "health")) == (200, {"status": "ok", "role": "repository"})
    assert (await get_json(url(repository, "nowhere")))[0] == 404


async def post_publish(repo: RepositoryServer, body: bytes) -> tuple[int, dict]:
    import aiohttp
    import orjson

    async with aiohttp.ClientSession() as session, session.post(url(repo, "publish"), data=body) as response:
        return response.status, orjson.loads(await response.read())


async def test_post_publish_registers_many_streams_at_once(repository: RepositoryServer) -> None:
    body = b'{"s": ["A", "B", "C"], "h": "127.0.0.1", "p": 9005, "rep": true, "lvl": 2, "ttl": 5000}'
    assert await post_publish(repository, body) == (200, {"status": "ok", "lease_ms": 5000, "streams": 3})
    _, streams = await get_json(url(repository, "streams"))
    entry = [{"host": "127.0.0.1", "port": 9005, "rep": True, "lvl": 2}]
    assert streams == {"streams": {"A": entry, "B": entry, "C": entry}, "next": None}


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"s": "A", "h": "x", "p": 1}', "list of stream names"),
        (b'{"s": [], "h": "x", "p": 1}', "list of stream names"),
        (b'{"s": ["A", 3], "h": "x", "p": 1}', "list of stream names"),
        (b'{"s": ["A"], "p": 1}', "'h'"),
        (b'{"s": ["A"], "h": "x", "p": 1, "rep": false, "lvl": 3}', "level 0"),
    ],
)
async def test_post_publish_rejects_bad_bodies_and_registers_nothing(
    repository: RepositoryServer, body: bytes, needle: str
) -> None:
    status, answer = await post_publish(repository, body)
    assert status == 400 and needle in answer["error"]
    assert (await get_json(url(repository, "streams")))[1] == {"streams": {}, "next": None}
