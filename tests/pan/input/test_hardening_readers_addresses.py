"""Readers that no hostile answer can misdirect (issue 10, finding 3, clients' half): a `/subscribe` answer
decides where requests go, so it is validated and URLs are built from parts; so are repository addresses."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import orjson
import pytest
from aiohttp import web

from pan.http.server import HttpServer
from pan.input.subscriber import StreamSubscriber
from pan.repository.client import parse_address
from tests.conftest import HOST, ROOT
from tests.pan.input.publishers import page, serving


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
