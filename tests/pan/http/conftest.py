"""Fixtures of the HTTP fuzz tests (``test_fuzz_http_*.py``): one forwarder and two repositories, shared.

One forwarder and two repositories serve from a background thread (``tests/support/live_servers.py``) for the
whole package, not per module: the fuzz files share them as the families did when they were one module, and
``test_servers_answer_after_fuzzing`` (``test_fuzz_http_worker.py``, the last fuzz file by name, so it runs
after the others) checks them after every family was sent.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.conftest import sensor_row
from tests.pan.http.fuzz_http_servers import BUFFER, FULL, PREFILL, SHORT, SID, STREAMS
from tests.support.live_servers import HOST, LiveServers, LogCounter, RawHttp, wait_for


def _ingest(servers: LiveServers, rows: list[str]) -> None:
    with socket.create_connection((HOST, servers.ingest_port), timeout=30) as sock:
        sock.sendall("".join(row + "\n" for row in rows).encode())


@pytest.fixture(scope="package")
def log_counter() -> Iterator[LogCounter]:
    with LogCounter.on_root() as counter:
        yield counter


@pytest.fixture(scope="package")
def servers(log_counter: LogCounter) -> Iterator[LiveServers]:
    live = LiveServers.start(STREAMS, buffer_size=BUFFER, extra_repositories=1)
    try:
        rows = [sensor_row(SID[name], 10_000 + k, k) for name, count in PREFILL.items() for k in range(count)]
        _ingest(live, rows)
        client = RawHttp(live.worker_port)
        wait_for(lambda: client.get(f"/data?s={FULL}&l=1").json()["last"] == PREFILL[FULL] - 1)
        wait_for(lambda: client.get(f"/data?s={SHORT}&l=1").json()["last"] == PREFILL[SHORT] - 1)
        client.close()
        yield live
    finally:
        live.stop()


@pytest.fixture(scope="package")
def worker_http(servers: LiveServers) -> Iterator[RawHttp]:
    client = RawHttp(servers.worker_port)
    yield client
    client.close()


@pytest.fixture(scope="package")
def repo_http(servers: LiveServers) -> Iterator[RawHttp]:
    """The repository the forwarder publishes to: only its three streams are registered."""
    client = RawHttp(servers.repository.port)
    yield client
    client.close()


@pytest.fixture(scope="package")
def scratch_http(servers: LiveServers) -> Iterator[RawHttp]:
    """A second repository that the publish fuzz fills and empties again."""
    client = RawHttp(servers.extra[0].port)
    yield client
    client.close()
