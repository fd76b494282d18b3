"""Issue 10, findings 3 and 5: the repository validates what it registers, and stays small and fast.

Finding 3 (SSRF): a registration's ``h`` became part of the URL every
subscriber fetched, so ``h=127.0.0.1:31098/admin/...`` sent them anywhere;
``h`` as a JSON object and ``rep:"yes"`` were accepted too.  Finding 5: one
`/subscribe` walked the whole registry, which had no bounds and one 25 MB
`/streams` answer.  Every test runs a real RepositoryServer over loopback.
"""

from __future__ import annotations

import re
from typing import Any

import aiohttp
import orjson
import pytest

from pan.http.addresses import free_port
from pan.repository.client import RepositoryClient
from pan.repository.registry import SWEEP_STEPS, Registry, RegistryLimits
from pan.repository.server import RepositoryServer
from tests.conftest import HOST, get_json
from tests.support import prometheus

GOOD = {"s": "S0", "h": "127.0.0.1", "p": "9000"}


def url(repo: RepositoryServer, path: str) -> str:
    return f"http://{HOST}:{repo.port}/{path}"


async def post(repo: RepositoryServer, body: bytes) -> tuple[int, str, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url(repo, "publish"), data=body, timeout=aiohttp.ClientTimeout(total=30)) as response,
    ):
        return response.status, response.content_type, orjson.loads(await response.read())


async def registry_view(repo: RepositoryServer) -> Any:
    return (await get_json(url(repo, "streams")))[1]


@pytest.fixture
async def registered(repository: RepositoryServer) -> RepositoryServer:
    """A repository holding one good registration, which no bad request may disturb."""
    assert (await get_json(url(repository, "publish"), **GOOD))[0] == 200
    return repository


# --- finding 3: only hosts, ports and booleans --------------------------------------------------

BAD_HOSTS = [
    "127.0.0.1:31098/admin/delete-everything?confirm=yes#",  # the finding's SSRF
    "127.0.0.1:31098",  # a port of the registrant's choice
    "evil.example/admin",
    "user@127.0.0.1",
    "127.0.0.1?x=1",
    "127.0.0.1#frag",
    "two words",
    " 127.0.0.1",
    "a" * 64 + ".example",  # a label over 63 characters
    ("a" * 60 + ".") * 5,  # a name over 253 characters
    "[::1]",
    "fe80::1%eth0",
    "2130706433",  # an IPv4 in disguise
    "-bad.example",
    "bad-.example",
    "héllo.example",
    "..",
    "http://127.0.0.1",
]


@pytest.mark.parametrize("host", BAD_HOSTS)
async def test_get_publish_refuses_a_host_that_is_not_an_address_or_a_name(
    registered: RepositoryServer, host: str
) -> None:
    before = await registry_view(registered)
    status, answer = await get_json(url(registered, "publish"), s="S1", h=host, p=9001)
    assert status == 400 and answer["status"] == "error" and "'h'" in answer["error"]
    assert await registry_view(registered) == before


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "2001:db8::7", "localhost", "pan-worker-3.example.org", "x.y."])
async def test_addresses_and_dns_names_are_accepted(repository: RepositoryServer, host: str) -> None:
    assert (await get_json(url(repository, "publish"), s="S", h=host, p=9001))[0] == 200
    status, answer = await get_json(url(repository, "subscribe"), s="S")
    assert status == 200 and answer["host"] == host and answer["port"] == 9001


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"p": "0"}, "'p'"),
        ({"p": "65536"}, "'p'"),
        ({"p": " 80"}, "'p'"),
        ({"p": "+80"}, "'p'"),
        ({"p": "8_0"}, "'p'"),
        ({"p": "\u0668\u0660"}, "'p'"),  # Arabic-Indic 80
        ({"p": "80.0"}, "'p'"),
        ({"rep": "yes"}, "'rep'"),
        ({"rep": "no"}, "'rep'"),
        ({"rep": "True"}, "'rep'"),
        ({"rep": "on"}, "'rep'"),
        ({"s": "bad\nname"}, "'s'"),
        ({"s": "x" * 300}, "'s'"),
        ({"ttl": str(2 * 3_600_000)}, "'ttl'"),
    ],
)
async def test_get_publish_refuses_bad_ports_flags_names_and_leases(
    registered: RepositoryServer, params: dict[str, str], needle: str
) -> None:
    before = await registry_view(registered)
    status, answer = await get_json(url(registered, "publish"), **{"s": "S1", "h": "127.0.0.1", "p": "9001", **params})
    assert status == 400 and needle in answer["error"], answer
    assert await registry_view(registered) == before


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"h": {"host": "127.0.0.1"}}, "'h'"),
        ({"h": ["127.0.0.1"]}, "'h'"),
        ({"h": "127.0.0.1:31098/admin"}, "'h'"),
        ({"h": 2130706433}, "'h'"),
        ({"rep": "yes"}, "'rep'"),
        ({"rep": 1}, "'rep'"),
        ({"rep": "true"}, "'rep'"),
        ({"p": "9001"}, "'p'"),
        ({"p": 9001.5}, "'p'"),
        ({"p": True}, "'p'"),
        ({"p": [9001]}, "'p'"),
        ({"lvl": "1", "rep": True}, "'lvl'"),
        ({"ttl": "5000"}, "'ttl'"),
        ({"ttl": 10**18}, "'ttl'"),
        ({"admin": True}, "unknown field"),
        ({"s": ["ok", "bad\u0000name"]}, "'s'"),
    ],
)
async def test_post_publish_takes_json_values_of_their_own_types_only(
    registered: RepositoryServer, fields: dict[str, Any], needle: str
) -> None:
    before = await registry_view(registered)
    body = orjson.dumps({"s": ["S1", "S2"], "h": "127.0.0.1", "p": 9001, **fields})
    status, content_type, answer = await post(registered, body)
    assert (status, content_type) == (400, "application/json")
    assert answer["status"] == "error" and needle in answer["error"], answer
    assert await registry_view(registered) == before


@pytest.mark.parametrize(
    "params",
    [
        {"h": "127.0.0.1:9000/x"},
        {"h": "127.0.0.1 "},
        {"p": "+9000"},
        {"p": "9000 "},
        {"p": "\u0669\u0660\u0660\u0660"},
    ],
)
async def test_unpublish_validates_like_publish_and_keeps_the_registration(
    registered: RepositoryServer, params: dict[str, str]
) -> None:
    before = await registry_view(registered)
    status, answer = await get_json(url(registered, "unpublish"), **{**GOOD, **params})
    assert status == 400 and answer["status"] == "error"
    assert await registry_view(registered) == before


@pytest.mark.parametrize(
    "exclude",
    ["127.0.0.1:9000/x", "127.0.0.1:+9000", "127.0.0.1:0", "a b:9000", "127.0.0.1:9000,evil/x:1", "[::1:9000", ":9000"],
)
async def test_exclude_validates_its_endpoints(registered: RepositoryServer, exclude: str) -> None:
    status, answer = await get_json(url(registered, "subscribe"), s="S0", exclude=exclude)
    assert status == 400 and "exclude" in answer["error"]


async def test_exclude_takes_bracketed_ipv6(repository: RepositoryServer) -> None:
    await get_json(url(repository, "publish"), s="S", h="::1", p=9000)
    await get_json(url(repository, "publish"), s="S", h="127.0.0.1", p=9000)
    for _ in range(10):
        status, answer = await get_json(url(repository, "subscribe"), s="S", exclude="[::1]:9000")
        assert status == 200 and answer["host"] == "127.0.0.1"


# --- finding 5: bounds ----------------------------------------------------------------------------


@pytest.fixture
async def small_repository() -> Any:
    server = RepositoryServer(
        HOST,
        free_port(),
        seed=1,
        limits=RegistryLimits(max_streams_per_publisher=50, max_registrations=120, max_lease_ms=60_000),
        max_body_bytes=4096,
    )
    await server.start()
    yield server
    await server.stop()


def names(prefix: str, count: int) -> list[str]:
    return [f"{prefix}{n:03d}" for n in range(count)]


async def publish_many(repo: RepositoryServer, streams: list[str], port: int, **extra: Any) -> tuple[int, str, Any]:
    return await post(repo, orjson.dumps({"s": streams, "h": HOST, "p": port, **extra}))


async def metric(repo: RepositoryServer, name: str, **labels: str) -> float:
    async with aiohttp.ClientSession() as session, session.get(url(repo, "metrics")) as response:
        return prometheus.value(await response.text(), name, **labels)


async def test_streams_per_publisher_are_bounded(small_repository: RepositoryServer) -> None:
    repo = small_repository
    assert (await publish_many(repo, names("A", 50), 9001))[0] == 200
    assert (await publish_many(repo, names("A", 50), 9001))[0] == 200  # a refresh adds nothing
    status, content_type, answer = await publish_many(repo, names("B", 1), 9001)
    assert (status, content_type) == (429, "application/json")
    assert answer["status"] == "error" and "per publisher" in answer["error"]
    assert (await get_json(url(repo, "subscribe"), s="B000"))[0] == 404  # nothing of it was registered
    assert (await get_json(url(repo, "subscribe"), s="A049"))[0] == 200
    assert await metric(repo, "pan_repository_refused_total", reason="publisher_streams") == 1


async def test_total_registrations_are_bounded_and_subscribe_still_answers(small_repository: RepositoryServer) -> None:
    repo = small_repository
    assert (await publish_many(repo, names("A", 50), 9001))[0] == 200
    assert (await publish_many(repo, names("B", 50), 9002))[0] == 200
    status, _, answer = await publish_many(repo, names("C", 30), 9003)  # 130 > 120: all or nothing
    assert status == 429 and "limit of 120" in answer["error"]
    assert (await get_json(url(repo, "subscribe"), s="C000"))[0] == 404
    assert (await publish_many(repo, names("C", 20), 9003))[0] == 200  # exactly full
    for stream in ("A000", "B049", "C019"):
        status, answer = await get_json(url(repo, "subscribe"), s=stream)
        assert status == 200 and answer["stream"] == stream
    assert await metric(repo, "pan_repository_registrations", role="repository") == 120
    assert await metric(repo, "pan_repository_refused_total", reason="registry_full") == 1


async def test_lease_is_bounded(small_repository: RepositoryServer) -> None:
    status, _, answer = await publish_many(small_repository, ["A"], 9001, ttl=60_001)
    assert status == 400 and "'ttl' must be <= 60000" in answer["error"]
    assert (await publish_many(small_repository, ["A"], 9001, ttl=60_000))[0] == 200


async def test_body_size_is_bounded(small_repository: RepositoryServer) -> None:
    body = orjson.dumps({"s": names("LONG-STREAM-NAME-", 400), "h": HOST, "p": 9001})
    assert len(body) > 4096
    status, content_type, answer = await post(small_repository, body)
    assert (status, content_type) == (413, "application/json")
    assert answer["status"] == "error" and "4096" in answer["error"]
    assert await registry_view(small_repository) == {"streams": {}, "next": None}


async def test_default_bounds_hold_a_full_game_with_headroom(repository: RepositoryServer) -> None:
    """14 peers, ~450 streams, a producer and two repeater levels for each: well inside the defaults."""
    streams = [f"S{n}" for n in range(450)]
    for peer in range(14):
        mine = streams[peer::14]
        assert (await publish_many(repository, mine, 9000 + peer))[0] == 200
        assert (await publish_many(repository, mine, 9100 + peer, rep=True, lvl=1))[0] == 200
        assert (await publish_many(repository, mine, 9200 + peer, rep=True, lvl=2))[0] == 200
    async with RepositoryClient((HOST, repository.port)) as client:
        listed = await client.streams()
    assert len(listed) == 450 and all(len(pubs) == 3 for pubs in listed.values())


async def test_many_registrations_then_the_next_one_is_refused_and_subscribe_answers(
    repository: RepositoryServer,
) -> None:
    """The default registry bound (100,000) is reached through valid requests, and holds."""
    limits = repository.registry.limits
    per_post = limits.max_streams_per_publisher
    posts = limits.max_registrations // per_post
    for k in range(posts):
        streams = [f"P{k}-{n}" for n in range(per_post)]
        status, _, answer = await publish_many(repository, streams, 10_000 + k, ttl=limits.max_lease_ms)
        assert status == 200, answer
    status, _, answer = await publish_many(repository, ["ONE-MORE"], 20_000)
    assert status == 429 and answer["status"] == "error"
    status, answer = await get_json(url(repository, "subscribe"), s=f"P{posts - 1}-{per_post - 1}")
    assert status == 200 and answer["port"] == 10_000 + posts - 1
    status, page = await get_json(url(repository, "streams"))
    assert status == 200 and len(page["streams"]) == 1000 and page["next"] is not None


# --- finding 5: cost --------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_lookup_does_bounded_work_even_when_everything_expired() -> None:
    """`/subscribe` used to expire the whole registry on every call; now one call sweeps a bounded batch."""
    clock = Clock()
    registry = Registry(RegistryLimits(max_streams_per_publisher=100_000, max_registrations=100_000), clock=clock)
    registry.publish([f"S{n}" for n in range(50_000)], "127.0.0.1", 9000, False, 0, 1000)
    registry.publish(["KEEP"], "127.0.0.1", 9001, False, 0, 60_000)
    clock.now += 2  # every S* lease is over
    assert registry.publishers("S7") == []  # its own stream is expired on the spot
    assert len(registry) >= 50_001 - SWEEP_STEPS - 1  # ...but the rest waits for later sweeps
    assert [p.port for p in registry.publishers("KEEP")] == [9001]
    registry.sweep(None)
    assert len(registry) == 1


def test_refreshed_leases_survive_the_sweep_and_expired_ones_make_room() -> None:
    clock = Clock()
    registry = Registry(RegistryLimits(max_streams_per_publisher=10, max_registrations=10), clock=clock)
    registry.publish([f"A{n}" for n in range(5)], "127.0.0.1", 9000, False, 0, 1000)
    registry.publish([f"B{n}" for n in range(5)], "127.0.0.1", 9001, False, 0, 1000)
    clock.now += 0.9
    registry.publish([f"A{n}" for n in range(5)], "127.0.0.1", 9000, False, 0, 1000)  # refresh
    clock.now += 0.2  # B* expired, A* not
    registry.publish([f"C{n}" for n in range(5)], "127.0.0.1", 9002, False, 0, 1000)  # room made by expiry
    assert sorted(registry.snapshot()) == [*(f"A{n}" for n in range(5)), *(f"C{n}" for n in range(5))]


def test_unpublish_and_republish_keep_the_deadline_heap_bounded() -> None:
    clock = Clock()
    registry = Registry(clock=clock)
    for _ in range(10_000):
        registry.publish(["S"], "127.0.0.1", 9000, False, 0, 60_000)
        assert registry.unpublish("S", "127.0.0.1", 9000)
    assert len(registry._deadlines) <= 1024 + 2


# --- finding 5: pages -----------------------------------------------------------------------------


async def test_streams_and_debug_come_in_pages(repository: RepositoryServer) -> None:
    expected = sorted(f"S{n:02d}" for n in range(25))
    await publish_many(repository, expected, 9000)
    seen: list[str] = []
    after: str | None = None
    while True:
        params = {"limit": 10} if after is None else {"limit": 10, "after": after}
        status, page = await get_json(url(repository, "streams"), **params)
        assert status == 200 and len(page["streams"]) <= 10
        seen += list(page["streams"])
        after = page["next"]
        if after is None:
            break
    assert seen == expected
    async with RepositoryClient((HOST, repository.port)) as client:
        assert sorted(await client.streams(page=7)) == expected
    status, html_page = await get_json(url(repository, "debug"), limit=10)
    assert status == 200 and re.findall(r"<tr><td>(S\d\d)</td>", html_page) == expected[:10]
    assert 'href="http://127.0.0.1:9000/debug"' in html_page  # the publisher's own page
    assert re.search(r'href="\?after=S09&amp;limit=10"', html_page)
    for bad in ({"limit": 0}, {"limit": 10_001}, {"limit": "ten"}):
        status, answer = await get_json(url(repository, "streams"), **bad)
        assert status == 400 and "'limit'" in answer["error"]
