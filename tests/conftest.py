"""Shared fixtures: real servers and real processes on loopback with free ports."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from pan.config.specs import Workflow
from pan.config.trust import Trust
from pan.http.addresses import free_port
from pan.input.local import LocalPublishers
from pan.launch.lifeline import shared_lifeline
from pan.repository.server import RepositoryServer
from pan.worker.worker import Worker
from pan.workflow.parser import parse_workflow

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"

# Benchmarks started by tests write their reports into temporary folders: a busy CI machine must not make
# `--write` refuse (benchmarks/results.py); tests of that refusal pass --max-load themselves.
os.environ.setdefault("PAN_BENCH_MAX_LOAD", "inf")


pytest_plugins = ["tests.support.processes", "tests.support.cluster"]

#: Fixtures that start OS processes: every test using one is a `process` test.
PROCESS_FIXTURES = {"spark", "processes"}


#: Why a test is left out, by mark: the first mark of a test that its run does not include.
SKIP_REASONS = {
    "heavy": "heavy: a replay of minutes of a match or a benchmark's acceptance run; runs when PAN_HEAVY=1 "
             "(make test-heavy)",
    "slow": "slow: runs when CI=true or PAN_SLOW=1",
    "process": "process: runs when CI=true or PAN_SLOW=1",
}


def included_marks() -> set[str]:
    """The marks this run includes: the quick suite none, CI and PAN_SLOW=1 slow and process tests, PAN_HEAVY=1 all.

    Heavy tests take minutes each (together about 80 min on 2 cores): CI leaves them out to finish in its time.
    """
    if os.environ.get("PAN_HEAVY") == "1":
        return {"heavy", "slow", "process"}
    if os.environ.get("CI") == "true" or os.environ.get("PAN_SLOW") == "1":
        return {"slow", "process"}
    return set()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The quick suite leaves out slow tests and tests that start OS processes; CI also leaves out heavy ones."""
    for item in items:
        if PROCESS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.process)
    included = included_marks()
    for item in items:
        for mark, reason in SKIP_REASONS.items():
            if mark in item.keywords and mark not in included:
                item.add_marker(pytest.mark.skip(reason=reason))
                break


async def get_json(url: str, **params: Any) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(url, params={k: str(v) for k, v in params.items()}, timeout=aiohttp.ClientTimeout(total=10))
        as response,
    ):
        body = await response.read()
        try:
            return response.status, orjson.loads(body)
        except orjson.JSONDecodeError:
            return response.status, body.decode()


def sensor_row(sid: int, ts: int, k: int = 0) -> str:
    return f"{sid},{ts},{1000 + k},{-2000 - k},{100},{5000000},{60000},{10000},0,0,0,{10000},0"


def workflow_dict(repo_port: int, workers: list[dict[str, Any]], refresh_ms: int = 300) -> dict[str, Any]:
    return {
        "name": "test",
        "repository": {"host": HOST, "port": repo_port, "refresh_ms": refresh_ms},
        "workers": workers,
    }


def forwarder(
    name: str, streams: list[str], *, ingest_port: int | None = None, params: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    """A forwarder that receives ``streams`` on its ingest port, CSV sensor rows (debs_csv) or JSON."""
    return {
        "name": name,
        "type": "forwarder",
        "host": HOST,
        "port": free_port(),
        "params": {
            "ingest_port": free_port() if ingest_port is None else ingest_port,
            "inter_pan_inputs": streams,
            "decoder": "debs_csv",
            **(params or {}),
        },
        **extra,
    }


def repeater(name: str, streams: list[str], level: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "type": "repeater",
        "host": HOST,
        "port": free_port(),
        "inputs": streams,
        "params": {"level": level},
        **extra,
    }


@contextlib.asynccontextmanager
async def data_server(answer: Callable[[web.Request], Awaitable[web.Response]]) -> AsyncIterator[int]:
    """A bare aiohttp server whose only route, ``GET /data``, answers with ``answer`` (a publisher that is not
    a PAN worker: an older peer, a broken one); yields its port."""
    app = web.Application()
    app.router.add_get("/data", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, HOST, port).start()
    try:
        yield port
    finally:
        await runner.cleanup()


async def wait_until(predicate: Callable[[], Any], timeout_s: float = 10.0, interval_s: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = predicate()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        await asyncio.sleep(interval_s)


@pytest.fixture
async def repository() -> AsyncIterator[RepositoryServer]:
    server = RepositoryServer(HOST, free_port(), seed=1)
    await server.start()
    yield server
    await server.stop()


class WorkerGroup:
    """Workers started in-process (real aiohttp servers) and stopped at teardown."""

    def __init__(self, local: LocalPublishers | None = None) -> None:
        self.workers: list[Worker] = []
        self.local = local  # given: the group is one peer, whose workers pull in-process

    async def start(self, workflow: Workflow, names: list[str] | None = None) -> list[Worker]:
        started = []
        for spec in workflow.workers:
            if names is None or spec.name in names:
                worker = Worker(spec, workflow.repository, local=self.local, replicas=workflow.replicas,
                                trust=Trust.of(workflow), lossless=workflow.delivery == "lossless",
                                batched_pulls=workflow.pulls == "batched")
                await worker.start()
                self.workers.append(worker)
                started.append(worker)
        return started

    async def stop_all(self) -> None:
        for worker in reversed(self.workers):
            await worker.stop()
        self.workers.clear()


@pytest.fixture
async def workers() -> AsyncIterator[WorkerGroup]:
    group = WorkerGroup()
    yield group
    await group.stop_all()


def make_workflow(repo_port: int, workers: list[dict[str, Any]], refresh_ms: int = 300) -> Workflow:
    return parse_workflow(workflow_dict(repo_port, workers, refresh_ms))


class Processes:
    """`pan` subprocesses that are always terminated at teardown."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen[bytes]] = []

    def pan(self, *args: str, log_name: str = "pan") -> subprocess.Popen[bytes]:
        with open(self.tmp / f"{log_name}-{len(self.procs)}.log", "wb") as log:  # the child keeps its own copy
            proc = subprocess.Popen(
                [sys.executable, "-m", "pan", *args], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                **shared_lifeline().spawn_options(),  # a killed pytest leaves no `pan` process behind
            )
        self.procs.append(proc)
        return proc

    def write_workflow(self, data: dict[str, Any], name: str = "workflow.json") -> Path:
        path = self.tmp / name
        path.write_text(json.dumps(data, indent=1))
        return path

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    group = Processes(tmp_path)
    yield group
    group.stop_all()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The one local Spark session of the whole run (skips without Java): Spark jobs reuse it."""
    from pan.offline.spark import SparkUnavailable, get_session

    try:
        session = get_session(app_name="pan-test-reference", config={"spark.sql.shuffle.partitions": "4"})
    except SparkUnavailable as exc:  # pragma: no cover - the project's setup installs Java
        pytest.skip(str(exc))
    yield session
