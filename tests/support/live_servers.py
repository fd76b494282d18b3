"""Real PAN servers on their own event loop in a background thread, for synchronous fuzz tests.

Hypothesis drives tests synchronously, one example after another, thousands
of times: the servers must be started once per module and stay up across
examples.  Running them on a private event loop in a daemon thread lets the
test thread talk to them over real loopback sockets with plain blocking
clients (``RawHttp``), exactly as a stranger would.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson

from pan.config.specs import Workflow
from pan.http.addresses import free_port
from pan.repository.server import RepositoryServer
from pan.worker.worker import Worker
from pan.workflow.parser import parse_workflow

HOST = "127.0.0.1"
START_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 30.0  # per blocking socket operation; a fuzz request that needs it has hung
#: Workers refresh their registrations this often; the lease is three periods, so a busy test
#: thread starving the server thread for a few seconds cannot expire the worker's streams.
REFRESH_MS = 5_000

T = TypeVar("T")


class ServerThread:
    """An event loop in a daemon thread; coroutines are submitted from the test thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="pan-live-servers", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = START_TIMEOUT_S) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def call(self, func: Callable[[], T], timeout_s: float = START_TIMEOUT_S) -> T:
        """Run a plain function on the loop's thread (server state is not thread-safe)."""

        async def call() -> T:
            return func()

        return self.run(call(), timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(START_TIMEOUT_S)
        self.loop.close()


def forwarder_workflow(repository_port: int, streams: list[str], buffer_size: int) -> Workflow:
    """A one-forwarder workflow whose ports are free now."""
    return parse_workflow(
        {
            "name": "fuzz",
            "repository": {"host": HOST, "port": repository_port, "refresh_ms": REFRESH_MS},
            "workers": [
                {
                    "name": "fuzz-forwarder",
                    "type": "forwarder",
                    "host": HOST,
                    "port": free_port(),
                    "params": {"ingest_port": free_port(), "inter_pan_inputs": streams, "decoder": "debs_csv"},
                    "buffer_size": buffer_size,
                }
            ],
        }
    )


@dataclass
class LiveServers:
    """A repository and one forwarder (publishing ``streams``) serving from a ServerThread."""

    thread: ServerThread
    repository: RepositoryServer
    worker: Worker
    extra: list[RepositoryServer] = field(default_factory=list)

    @classmethod
    def start(cls, streams: list[str], *, buffer_size: int = 10_000, extra_repositories: int = 0) -> LiveServers:
        thread = ServerThread()

        async def start() -> LiveServers:
            repository = RepositoryServer(HOST, free_port(), seed=1)
            await repository.start()
            extra = []
            for _ in range(extra_repositories):
                other = RepositoryServer(HOST, free_port(), seed=2)
                await other.start()
                extra.append(other)
            workflow = forwarder_workflow(repository.port, streams, buffer_size)
            worker = Worker(workflow.workers[0], workflow.repository)
            await worker.start()
            return cls(thread, repository, worker, extra)

        return thread.run(start())

    @property
    def worker_port(self) -> int:
        return self.worker.server.port

    @property
    def ingest_port(self) -> int:
        return int(self.worker.component.counters()["ingest_port"])

    def ingest_counters(self) -> dict[str, Any]:
        return self.thread.call(self.worker.component.counters)

    def stop(self) -> None:
        async def stop() -> None:
            await self.worker.stop()
            for server in [self.repository, *self.extra]:
                await server.stop()

        try:
            self.thread.run(stop())
        finally:
            self.thread.close()


# --- a blocking HTTP/1.1 client that sends any bytes ------------------------------------------


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: bytes
    headers: dict[str, str]

    def json(self) -> Any:
        return orjson.loads(self.body)

    def describe(self) -> str:
        return f"{self.status} {self.content_type!r} {self.body[:300]!r}"


class NoAnswer(AssertionError):
    """The server closed the connection (or stayed silent) instead of answering."""


class RawHttp:
    """One keep-alive connection to 127.0.0.1:port: requests are raw bytes, answers are parsed here.

    The parser accepts any ``HTTP/x.y`` status line (aiohttp echoes the
    request's version).  A reused connection that the server closed in
    between is reopened once; a fresh one that gets no answer raises ``NoAnswer``.
    """

    def __init__(self, port: int, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.port = port
        self.timeout_s = timeout_s
        self._sock: socket.socket | None = None
        self._buffer = b""
        self.sent = 0

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._buffer = b""

    def send(self, raw: bytes, *, head: bool = False, fresh: bool = False) -> Answer:
        if fresh:
            self.close()
        for attempt in (0, 1):
            reused = self._sock is not None
            if self._sock is None:
                self._sock = socket.create_connection((HOST, self.port), timeout=self.timeout_s)
                self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                self._sock.sendall(raw)
                answer, keep = self._read_answer(head)
            except (ConnectionError, EOFError) as exc:
                self.close()
                if reused and attempt == 0:
                    continue  # the server had closed the idle connection: retry once on a new one
                raise NoAnswer(f"no answer to {raw[:200]!r}: {exc!r}") from exc
            except TimeoutError as exc:
                self.close()
                raise NoAnswer(f"no answer within {self.timeout_s} s to {raw[:200]!r}") from exc
            self.sent += 1
            if not keep:
                self.close()
            return answer
        raise AssertionError("unreachable")

    def _recv(self) -> None:
        assert self._sock is not None
        chunk = self._sock.recv(1 << 16)
        if not chunk:
            raise EOFError("connection closed")
        self._buffer += chunk

    def _read_exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            self._recv()
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    def _read_answer(self, head: bool) -> tuple[Answer, bool]:
        while True:
            while b"\r\n\r\n" not in self._buffer:
                self._recv()
            block, self._buffer = self._buffer.split(b"\r\n\r\n", 1)
            status_line, *header_lines = block.decode("latin-1").split("\r\n")
            match = re.fullmatch(r"HTTP/(\d\.\d) (\d{3})(?: .*)?", status_line)
            if match is None:
                raise AssertionError(f"not an HTTP status line: {status_line[:200]!r}")
            version, status = match.group(1), int(match.group(2))
            headers = {}
            for line in header_lines:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            if status >= 200:
                break  # 1xx (100 Continue) answers precede the real one
        if head or status in (204, 304):
            body = b""
        elif "content-length" in headers:
            body = self._read_exactly(int(headers["content-length"]))
        else:  # no length: the body runs to the end of the connection
            try:
                while True:
                    self._recv()
            except EOFError:
                body, self._buffer = self._buffer, b""
            return Answer(status, headers.get("content-type", ""), body, headers), False
        keep = version == "1.1" and headers.get("connection", "").lower() != "close"
        return Answer(status, headers.get("content-type", ""), body, headers), keep

    def get(self, target: str, headers: dict[str, str] | None = None) -> Answer:
        return self.send(request_bytes("GET", target.encode("ascii"), headers=headers))

    def post(self, target: str, body: bytes, content_type: str = "application/json") -> Answer:
        return self.send(request_bytes("POST", target.encode("ascii"), body, {"Content-Type": content_type}))


def request_bytes(
    method: str, target: bytes, body: bytes = b"", headers: dict[str, str] | None = None
) -> bytes:
    """A well-formed HTTP/1.1 request with Host and Content-Length."""
    lines = [method.encode() + b" " + target + b" HTTP/1.1", f"Host: {HOST}".encode()]
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}".encode())
    if body or method == "POST":
        lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


# --- the error contract ------------------------------------------------------------------------

JSON_TYPE = "application/json"


def check_error_contract(answer: Answer, *, head: bool = False) -> None:
    """Every answer: no 5xx; every non-2xx answer is ``{"status":"error","error":str}`` as application/json."""
    assert answer.status < 500, f"server error: {answer.describe()}"
    if 200 <= answer.status < 300:
        return
    assert answer.content_type.split(";")[0].strip() == JSON_TYPE, f"non-JSON error: {answer.describe()}"
    if head:
        return
    try:
        payload = answer.json()
    except orjson.JSONDecodeError:
        raise AssertionError(f"error body is not JSON: {answer.describe()}") from None
    assert isinstance(payload, dict), answer.describe()
    assert payload.get("status") == "error", answer.describe()
    assert isinstance(payload.get("error"), str) and payload["error"], answer.describe()


# --- server logs -----------------------------------------------------------------------------


class LogCounter(logging.Handler):
    """Counts records of the servers' loggers by level, keeping the first few ERROR lines for the report."""

    @classmethod
    @contextlib.contextmanager
    def on_root(cls) -> Iterator[LogCounter]:
        """A counter attached to the root logger for the duration of the block."""
        counter = cls()
        root = logging.getLogger()
        root.addHandler(counter)
        try:
            yield counter
        finally:
            root.removeHandler(counter)

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.counts: dict[int, int] = {}
        self.errors: list[str] = []
        self.started = time.monotonic()

    def emit(self, record: logging.LogRecord) -> None:
        if not record.name.startswith(("pan", "aiohttp")):
            return
        self.counts[record.levelno] = self.counts.get(record.levelno, 0) + 1
        if record.levelno >= logging.ERROR and len(self.errors) < 5:
            self.errors.append(f"{record.name}: {record.getMessage()[:300]}")

    def at_least(self, level: int) -> int:
        return sum(count for lvl, count in self.counts.items() if lvl >= level)


def wait_for(predicate: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    """Poll ``predicate`` from the test thread until it is truthy (conditions, never fixed sleeps)."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(0.01)

