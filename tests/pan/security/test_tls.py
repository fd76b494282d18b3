"""HTTPS for a workflow's repositories and workers, verified against the workflow's CA (issue 14, item 4)."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from pan.config.trust import Trust
from pan.http.addresses import free_port
from pan.ingest.server import send_lines
from pan.input.subscriber import StreamSubscriber, SubscriberError
from pan.repository.client import NotTrusted, RepositoryClient
from pan.repository.server import RepositoryServer
from pan.security.tls import TlsError, TlsFiles, client_context, make_certificates
from pan.workflow.parser import load_workflow, parse_workflow
from tests.conftest import HOST, Processes, WorkerGroup, forwarder, repeater, sensor_row, wait_until, workflow_dict

STREAMS = ["SENSOR4"]


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_certificates(tmp_path_factory.mktemp("certs"), [HOST, "localhost"])


@pytest.fixture(scope="module")
def strangers(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    """Certificates of another CA, for the same hosts."""
    return make_certificates(tmp_path_factory.mktemp("other-certs"), [HOST])


def test_a_workflow_names_its_certificates_and_they_must_load(tmp_path: Path, certificates: TlsFiles) -> None:
    data = {**workflow_dict(8080, [forwarder("F", STREAMS)]),
            "tls": {"ca": "ca.pem", "cert": "certs/{host}.pem", "key": "certs/{host}.key"}}
    path = tmp_path / "wf.json"
    path.write_bytes(orjson.dumps(data))
    tls = load_workflow(path).tls
    assert tls is not None and tls.ca == tmp_path.resolve() / "ca.pem"
    assert tls.cert_for("198.18.0.4") == (tmp_path.resolve() / "certs/198.18.0.4.pem",
                                          tmp_path.resolve() / "certs/198.18.0.4.key")
    with pytest.raises(TlsError, match=re.escape("ca.pem")):
        tls.client_context()
    with pytest.raises(TlsError, match=re.escape("198.18.0.4")):
        certificates.server_context("198.18.0.4")  # no certificate was made for this host
    with pytest.raises(Exception, match="tls"):
        parse_workflow({**data, "tls": {"ca": "ca.pem"}})


@pytest.fixture
async def secured(certificates: TlsFiles) -> AsyncIterator[dict[str, Any]]:
    trust = Trust(tls=certificates)
    repository = RepositoryServer(HOST, free_port(), tls=(certificates.server_context(HOST),
                                                         certificates.client_context()))
    await repository.start()
    specs = [forwarder("F", STREAMS), repeater("R", STREAMS, 1)]
    workflow = parse_workflow(workflow_dict(repository.port, specs))
    workflow.tls = certificates
    group = WorkerGroup()
    await group.start(workflow)
    assert all(worker.trust == trust for worker in group.workers)
    yield {"repository": repository, "specs": specs, "tls": certificates.client_context()}
    await group.stop_all()
    await repository.stop()


async def test_workers_pull_over_https_and_plain_http_is_refused(secured: dict[str, Any]) -> None:
    repository, specs, tls = secured["repository"], secured["specs"], secured["tls"]
    await send_lines(HOST, specs[0]["params"]["ingest_port"], [sensor_row(4, k).encode() for k in range(100)],
                     timeout_s=30)
    repeater_url = f"https://{HOST}:{specs[1]['port']}/data"

    async def repeated() -> bool:  # the repeater pulled from the forwarder over HTTPS
        async with aiohttp.ClientSession() as session, session.get(
                repeater_url, params={"s": "SENSOR4"}, ssl=tls, timeout=aiohttp.ClientTimeout(total=30)) as answer:
            return len(orjson.loads(await answer.read())["tuples"]) == 100

    await wait_until(repeated, timeout_s=120, interval_s=0.1)
    async with StreamSubscriber("SENSOR4", (HOST, repository.port), tls=tls, max_wait_ms=200) as subscriber:
        got: list[int] = []
        while len(got) < 100:
            got += [t["ts"] for t in (await asyncio.wait_for(subscriber.fetch(), 60)).tuples]
    assert got == list(range(100))

    for port in (repository.port, specs[0]["port"], specs[1]["port"]):
        async with aiohttp.ClientSession() as session:
            with pytest.raises(aiohttp.ClientError):
                async with session.get(f"http://{HOST}:{port}/health", timeout=aiohttp.ClientTimeout(total=30)):
                    pass


async def test_a_server_with_another_cas_certificate_is_not_believed(
        secured: dict[str, Any], strangers: TlsFiles) -> None:
    repository = secured["repository"]
    with pytest.raises(SubscriberError, match="certificate"):
        async with StreamSubscriber("SENSOR4", (HOST, repository.port), tls=strangers.client_context(),
                                    max_wait_ms=200) as subscriber:
            await asyncio.wait_for(subscriber.fetch(), 60)  # a clear failure, not a retry forever
    async with RepositoryClient((HOST, repository.port), tls=strangers.client_context(), timeout_s=30) as client:
        with pytest.raises(NotTrusted, match="certificate"):
            await client.streams()


async def _pan(*args: str) -> tuple[int, bytes, bytes]:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "pan", *args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, env=dict(os.environ))
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode is not None
    return proc.returncode, out, err


@pytest.mark.process
async def test_pan_run_serves_https_to_pan_subscribe(processes: Processes, tmp_path: Path) -> None:
    code, out, err = await _pan("certs", HOST, "--out", str(tmp_path / "certs"))  # prints the workflow's "tls"
    assert code == 0, err
    tls = orjson.loads(out)
    repo_port = free_port()
    spec = forwarder("F", STREAMS, peer="p1")
    path = processes.write_workflow({**workflow_dict(repo_port, [spec]), "tls": tls})
    processes.pan("run", str(path), log_name="run")
    async with RepositoryClient((HOST, repo_port), tls=client_context(Path(tls["ca"])), timeout_s=30) as client:
        await client.wait_for_publishers(STREAMS, 120)
    await send_lines(HOST, spec["params"]["ingest_port"], [sensor_row(4, k).encode() for k in range(30)],
                     timeout_s=30)
    code, out, err = await _pan("subscribe", "SENSOR4", "--repository", f"{HOST}:{repo_port}", "--count", "30",
                                "--ca", tls["ca"])
    assert code == 0, err
    assert [orjson.loads(line)["ts"] for line in out.splitlines()] == list(range(30))


@pytest.mark.process
async def test_pan_run_with_a_missing_certificate_starts_nothing(tmp_path: Path, certificates: TlsFiles) -> None:
    data = {**workflow_dict(free_port(), [forwarder("F", STREAMS, peer="p1")]),
            "tls": {"ca": str(certificates.ca), "cert": "nowhere/{host}.pem", "key": "nowhere/{host}.key"}}
    path = tmp_path / "wf.json"
    path.write_bytes(orjson.dumps(data))
    code, _, err = await _pan("run", str(path))
    assert code == 2 and b"nowhere" in err and b"Traceback" not in err
