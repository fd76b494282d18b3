"""The OpenAPI documents in docs/ against the servers (issue 10, build item 11).

Quick: both documents are valid OpenAPI 3.0, and the routes each server
registers are exactly the operations its document describes.  Slow: the
schemathesis CLI generates requests from each document (positive and
negative data) against a live forwarder and a live repository, with the
checks not_a_server_error, status_code_conformance,
content_type_conformance and response_schema_conformance.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from pan.http.addresses import free_port
from pan.repository.server import RepositoryServer
from pan.worker.worker import Worker
from tests.support.live_servers import HOST, LiveServers, RawHttp, forwarder_workflow, wait_for

ROOT = Path(__file__).resolve().parents[3]
DOCS = {"worker": ROOT / "docs" / "openapi-worker.yaml", "repository": ROOT / "docs" / "openapi-repository.yaml"}
HOOKS = ROOT / "tests" / "support" / "openapi_hooks.py"
CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"
#: Generated cases per operation in the slow run (schemathesis adds its coverage-phase cases on top).
EXAMPLES_PER_OPERATION = 300
SEED = 20261123


def load(name: str) -> dict[str, Any]:
    with DOCS[name].open() as handle:
        return yaml.safe_load(handle)


def documented_operations(doc: dict[str, Any]) -> set[tuple[str, str]]:
    methods = {"get", "post", "put", "delete", "patch", "head", "options"}
    return {(method.upper(), path) for path, item in doc["paths"].items() for method in item if method in methods}


def registered_routes(app: Any) -> set[tuple[str, str]]:
    """(method, path) of every route; aiohttp's implicit HEAD for each GET is left out."""
    return {(route.method, route.resource.canonical) for route in app.router.routes() if route.method != "HEAD"}


@pytest.mark.parametrize("name", sorted(DOCS))
def test_document_is_valid_openapi(name: str) -> None:
    from schemathesis.specs.openapi.definitions import OPENAPI_30_VALIDATOR

    doc = load(name)
    assert doc["openapi"].startswith("3.0")
    errors = [f"{'/'.join(map(str, e.instance_path))}: {e.message}" for e in OPENAPI_30_VALIDATOR.iter_errors(doc)]
    assert not errors, errors


def test_worker_routes_are_documented() -> None:
    workflow = forwarder_workflow(free_port(), ["S"], 10)
    worker = Worker(workflow.workers[0], workflow.repository)  # built, not started: its routes exist already
    assert registered_routes(worker.server.app) == documented_operations(load("worker"))


def test_repository_routes_are_documented() -> None:
    repository = RepositoryServer(HOST, free_port())
    assert registered_routes(repository.server.app) == documented_operations(load("repository"))


def test_every_error_answer_is_documented_as_the_error_contract() -> None:
    """Each documented 4xx answer is the JSON error object (the README's contract), nothing else."""
    for name in DOCS:
        doc = load(name)
        shared = doc["components"]["responses"]
        for path, item in doc["paths"].items():
            for method, operation in item.items():
                for status, response in operation["responses"].items():
                    if not status.startswith("4"):
                        continue
                    if "$ref" in response:
                        response = shared[response["$ref"].rsplit("/", 1)[1]]
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/Error"}, f"{name} {method} {path} {status}"


# --- schemathesis, slow ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def live() -> Iterator[LiveServers]:
    servers = LiveServers.start(["SENSOR4", "SENSOR8"], buffer_size=100)
    try:
        rows = "".join(f"4,{1000 + k},{k},2,3,4,5,6,7,8,9,10,11\n" for k in range(150))
        with socket.create_connection((HOST, servers.ingest_port), timeout=30) as sock:
            sock.sendall(rows.encode())
        client = RawHttp(servers.worker_port)
        wait_for(lambda: client.get("/data?s=SENSOR4&l=1").json()["last"] == 149)
        client.close()
        yield servers
    finally:
        servers.stop()


def run_schemathesis(doc: Path, port: int, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable, "-m", "schemathesis.cli", "run", str(doc),
        "--url", f"http://{HOST}:{port}",
        "--checks", CHECKS,
        "--max-examples", str(EXAMPLES_PER_OPERATION),
        "--seed", str(SEED),
        "--workers", "1",
        "--request-timeout", "30",
        "--suppress-health-check", "all",
        "--generation-database", "none",
        "--no-color",
        "--report", "junit", "--report-dir", str(tmp_path),
    ]  # fmt: skip
    env = {**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS), "PYTHONPATH": str(ROOT)}
    return subprocess.run(command, capture_output=True, text=True, timeout=1200, env=env, cwd=ROOT)


@pytest.mark.slow
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("name", sorted(DOCS))
def test_schemathesis_finds_nothing(name: str, live: LiveServers, tmp_path: Path) -> None:
    port = live.worker_port if name == "worker" else live.repository.port
    result = run_schemathesis(DOCS[name], port, tmp_path)
    summary = (result.stdout + result.stderr)[-6000:]
    assert result.returncode == 0, f"schemathesis found problems in docs/{DOCS[name].name}:\n{summary}"
    answer = RawHttp(port).get("/health")
    assert answer.status == 200, answer.describe()
