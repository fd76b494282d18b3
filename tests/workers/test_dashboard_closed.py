"""`pan dashboard` of a closed workflow, one with a secret and TLS (issue 16).

With the workflow file the dashboard reads with its read token over HTTPS and serves frames; without the
token (or with another CA) it says why, on stderr and on the page, rather than serving an empty page.
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from benchmarks import chromium
from pan.http.addresses import free_port
from pan.ingest.server import send_lines
from pan.repository.client import RepositoryClient
from pan.security.auth import Credentials
from pan.security.tls import make_certificates
from tests.conftest import HOST, Processes, forwarder, sensor_row, workflow_dict

pytestmark = [pytest.mark.process, pytest.mark.timeout(600)]

SECRET = b"a dashboard's secret, long enough"
WAIT_S = 120.0


async def wait_for(what: str, probe: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
    """Poll ``probe`` (sync) until it returns something true; fail naming ``what`` and the last value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    last: Any = None
    while loop.time() < deadline:
        try:
            last = probe()
        except Exception as exc:  # a server still starting, a page being redrawn
            last = exc
        else:
            if last:
                return last
        await asyncio.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s (last: {last!r})")


def healthy(port: int) -> bool:
    with urllib.request.urlopen(f"http://{HOST}:{port}/health", timeout=5) as response:
        return response.status == 200


@pytest.fixture
async def closed(processes: Processes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A running workflow with a secret and TLS: one forwarder of SENSOR4, its ingest port and how to read it."""
    monkeypatch.delenv("PAN_TOKEN", raising=False)  # the dashboards below get a token only where the test says
    certs = make_certificates(tmp_path / "certs", [HOST])
    (tmp_path / "pan.secret").write_bytes(SECRET + b"\n")
    repo_port = free_port()
    spec = forwarder("F", ["SENSOR4"], peer="p1")
    workflow = processes.write_workflow({
        **workflow_dict(repo_port, [spec]), "auth": {"secret_file": "pan.secret"},
        "tls": {"ca": str(certs.ca), "cert": certs.cert, "key": certs.key}})
    processes.pan("run", str(workflow), log_name="run")
    token = Credentials(SECRET).read_token
    async with RepositoryClient((HOST, repo_port), token=token, tls=certs.client_context(), timeout_s=30) as client:
        await client.wait_for_publishers(["SENSOR4"], WAIT_S)
    return {"workflow": workflow, "repository": f"{HOST}:{repo_port}", "ca": str(certs.ca),
            "ingest": spec["params"]["ingest_port"], "tmp": tmp_path}


def dashboard(processes: Processes, *args: str) -> tuple[int, Path]:
    """`pan dashboard ARGS` on a free port; its port and log."""
    port = free_port()
    processes.pan("dashboard", *args, "--port", str(port), log_name=f"dashboard-{port}")
    return port, processes.tmp / f"dashboard-{port}-{len(processes.procs) - 1}.log"


async def frames(port: int, want: list[str], until: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Frames of the dashboard's WebSocket, merged, until ``until(merged)`` holds."""
    merged: dict[str, Any] = {"streams": {}, "problems": {}}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT_S)) as session, \
            session.ws_connect(f"ws://{HOST}:{port}/ws") as ws:
        await ws.send_str(orjson.dumps({"want": want}).decode())
        async with asyncio.timeout(WAIT_S):
            async for message in ws:
                frame = orjson.loads(message.data)
                merged["streams"].update(frame.get("streams", {}))
                merged["problems"].update(frame.get("problems", {}))
                if until(merged):
                    return merged
    raise AssertionError(f"the WebSocket closed; got {merged!r:.500}")


async def test_the_dashboard_reads_a_closed_workflow_with_its_token_over_https(
        closed: dict[str, Any], processes: Processes) -> None:
    with_token, _ = dashboard(processes, "--workflow", str(closed["workflow"]))
    no_token, no_token_log = dashboard(processes, "--repository", closed["repository"], "--ca", closed["ca"])
    for port in (with_token, no_token):
        await wait_for(f"the dashboard on {port} answers /health", lambda port=port: healthy(port))

    rows = [sensor_row(4, ts, k=ts - 1000).encode() for ts in range(1000, 1050)]
    await send_lines(HOST, closed["ingest"], rows, timeout_s=30)
    got = await frames(with_token, ["SENSOR4", "$network"], lambda m: m["streams"].get("SENSOR4", [{}])[-1].get(
        "ts") == 1049 and "$network" in m["streams"])
    assert got["problems"] == {}
    newest = got["streams"]["SENSOR4"][-1]
    assert newest["x"] == 1000 + 49 and newest["y"] == -2000 - 49  # the row sent, read through the closed PAN
    network = got["streams"]["$network"][-1]
    assert network["errors"] == [] and "SENSOR4" in network["streams"]
    assert all("error" not in worker for worker in network["workers"].values()) and network["workers"]

    # Without the token: one clear line on stderr, and the page is told why it shows nothing.
    told = await frames(no_token, ["SENSOR4", "$network"], lambda m: "SENSOR4" in m["problems"]
                        and "$network" in m["streams"])
    assert "refused" in told["problems"]["SENSOR4"] and "SENSOR4" not in told["streams"]
    assert any("refused /streams (401)" in error for error in told["streams"]["$network"][-1]["errors"])
    logged = await wait_for("the token-less dashboard says why", lambda: "read token" in no_token_log.read_text()
                            and no_token_log.read_text())
    assert "refused" in logged and "--token-file" in logged and "Traceback" not in logged
    assert healthy(no_token)  # it keeps serving: the page shows the reason


async def test_a_dashboard_that_does_not_trust_the_certificate_says_so(
        closed: dict[str, Any], processes: Processes, tmp_path: Path) -> None:
    strangers = make_certificates(tmp_path / "other-certs", [HOST])
    (tmp_path / "token").write_text(Credentials(SECRET).read_token)
    port, log = dashboard(processes, "--repository", closed["repository"], "--token-file", str(tmp_path / "token"),
                          "--ca", str(strangers.ca))
    await wait_for("the dashboard answers /health", lambda: healthy(port))
    told = await frames(port, ["SENSOR4"], lambda m: "SENSOR4" in m["problems"])
    assert "certificate" in told["problems"]["SENSOR4"]
    logged = await wait_for("the dashboard says why", lambda: "--ca" in log.read_text() and log.read_text())
    assert "certificate" in logged and "Traceback" not in logged


async def test_the_page_shows_why_it_has_no_data(closed: dict[str, Any], processes: Processes) -> None:
    if (why := chromium.missing()) is not None:
        pytest.skip(why)
    port, _ = dashboard(processes, "--repository", closed["repository"], "--ca", closed["ca"])
    await wait_for("the dashboard answers /health", lambda: healthy(port))
    async with chromium.Chromiums(1) as browsers:  # quit at the end, with its temporary files
        browser = browsers.drivers[0]
        await asyncio.to_thread(browser.get, f"http://{HOST}:{port}/")

        def banner() -> str:
            element = browser.find_element("id", "problem")
            shown = element.is_displayed() and int(element.get_attribute("data-count") or 0) > 0
            return element.text if shown else ""

        text = await wait_for("the page shows the problem", banner)
        assert "cannot read" in text and "refused" in text
