"""A workflow's secret closes the repository and the workers (pan/security/auth.py); without one, PAN stays open."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from pan.config.specs import WorkflowError
from pan.http.addresses import free_port
from pan.ingest.server import send_lines
from pan.input.subscriber import StreamSubscriber, SubscriberError
from pan.repository.client import Registration, RepositoryClient
from pan.repository.server import RepositoryServer
from pan.security.auth import SIGNATURE_WINDOW_MS, AuthError, Credentials, Gate, SecretSource, bearer
from pan.worker.peer import serve_peer
from pan.workflow.parser import load_workflow, parse_workflow
from tests.conftest import forwarder, repeater, sensor_row, wait_until, workflow_dict
from tests.support import prometheus

SECRET = b"correct horse battery staple 42"
OTHER = b"a different secret, also long enough"
HOST = "127.0.0.1"


def now_ms() -> int:
    return 1_800_000_000_000


# --- the secret --------------------------------------------------------------------------------


def test_the_secret_comes_from_a_file_or_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "pan.secret"
    path.write_bytes(SECRET + b"\n")
    monkeypatch.setenv("PAN_TEST_SECRET", SECRET.decode())
    from_file = SecretSource(file=path).load()
    from_env = SecretSource(env="PAN_TEST_SECRET").load()
    assert from_file.read_token == from_env.read_token  # the trailing newline is not part of the secret
    assert from_file.read_token != Credentials(OTHER).read_token
    assert SECRET.decode() not in repr(from_file) and SECRET.decode() not in from_file.read_token


@pytest.mark.parametrize(("make", "expected"), [
    (lambda tmp: SecretSource(file=tmp / "missing"), "No such file"),
    (lambda tmp: SecretSource(env="PAN_TEST_UNSET_SECRET"), "is not set"),
    (lambda tmp: SecretSource(file=_write(tmp / "short", b"tiny\n")), "at least 16"),
])
def test_an_unusable_secret_is_a_clear_error(tmp_path: Path, make: Any, expected: str) -> None:
    with pytest.raises(AuthError, match=expected):
        make(tmp_path).load()


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_a_workflow_names_its_secret_and_never_holds_it(tmp_path: Path) -> None:
    data = workflow_dict(8080, [forwarder("F", ["S1"], ingest_port=9001)])
    path = tmp_path / "wf.json"
    path.write_bytes(orjson.dumps({**data, "auth": {"secret_file": "pan.secret"}}))
    assert load_workflow(path).auth == SecretSource(file=tmp_path.resolve() / "pan.secret")  # beside the workflow
    assert parse_workflow({**data, "auth": {"secret_env": "PAN_SECRET"}}).auth == SecretSource(env="PAN_SECRET")
    assert parse_workflow(data).auth is None
    for bad in ({}, {"secret_file": "a", "secret_env": "B"}, {"secret": "hunter2hunter2hunter2"}, "pan.secret"):
        with pytest.raises(WorkflowError, match="auth"):
            parse_workflow({**data, "auth": bad})


# --- the gate, unit by unit ------------------------------------------------------------------


def gate(clock: list[int]) -> Gate:
    return Gate(Credentials(SECRET), signed_paths=frozenset({"/publish"}), clock_ms=lambda: clock[0])


def signed(credentials: Credentials, query: dict[str, str], t_ms: int, body: bytes = b"") -> dict[str, str]:
    return credentials.signed_headers("GET", "/publish", query, body, now_ms=t_ms)


def test_reads_need_the_read_token_and_health_needs_nothing() -> None:
    g = gate([now_ms()])
    token = Credentials(SECRET).read_token
    g.check("GET", "/health", [], b"", {})
    g.check("GET", "/data", [("s", "X")], b"", bearer(token))
    with pytest.raises(AuthError) as missing:
        g.check("GET", "/data", [("s", "X")], b"", {})
    with pytest.raises(AuthError) as wrong:
        g.check("GET", "/data", [("s", "X")], b"", bearer(Credentials(OTHER).read_token))
    assert (missing.value.status, wrong.value.status) == (401, 403)
    assert g.refused == {"no_token": 1, "bad_token": 1}


def test_a_signature_holds_for_exactly_its_request_once_and_only_while_fresh() -> None:
    clock = [now_ms()]
    g = gate(clock)
    mine = Credentials(SECRET)
    query = {"s": "S1", "h": "198.18.0.7", "p": "9000"}
    headers = signed(mine, query, clock[0])
    g.check("GET", "/publish", query.items(), b"", headers)

    refusals = {
        "replayed": (query, headers),
        "unsigned": (query, {}),
        "tampered": ({**query, "h": "198.18.0.66"}, signed(mine, query, clock[0] + 1)),
        "forged": (query, signed(Credentials(OTHER), query, clock[0] + 2)),
        "stale": (query, signed(mine, query, clock[0] - SIGNATURE_WINDOW_MS - 1)),
        "future": (query, signed(mine, query, clock[0] + SIGNATURE_WINDOW_MS + 1)),
    }
    for what, (q, h) in refusals.items():
        with pytest.raises(AuthError) as refused:
            g.check("GET", "/publish", q.items(), b"", h)
        assert refused.value.status == (401 if what == "unsigned" else 403), what
    assert g.refused == {"replayed": 1, "unsigned": 1, "bad_signature": 2, "stale": 2}
    # A body is covered too: the same headers on another body are refused.
    body_headers = mine.signed_headers("POST", "/publish", None, b'{"s":["S1"]}', now_ms=clock[0] + 3)
    with pytest.raises(AuthError):
        g.check("POST", "/publish", [], b'{"s":["S2"]}', body_headers)
    g.check("POST", "/publish", [], b'{"s":["S1"]}', body_headers)


def test_used_signatures_are_forgotten_once_stale() -> None:
    clock = [now_ms()]
    g = gate(clock)
    mine = Credentials(SECRET)
    for n in range(50):
        g.check("GET", "/publish", [("s", f"S{n}")], b"", signed(mine, {"s": f"S{n}"}, clock[0]))
    clock[0] += SIGNATURE_WINDOW_MS + 1_000
    g.check("GET", "/publish", [("s", "late")], b"", signed(mine, {"s": "late"}, clock[0]))
    assert len(g._used) == 1


# --- a real repository ---------------------------------------------------------------------------


async def _get(url: str, headers: dict[str, str] | None = None, **params: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.get(
        url, params=params, headers=headers or {}, timeout=aiohttp.ClientTimeout(total=30)
    ) as response:
        return response.status, orjson.loads(await response.read())


async def test_a_closed_repository_refuses_strangers_and_serves_its_peers() -> None:
    mine = Credentials(SECRET)
    server = RepositoryServer(HOST, 0, credentials=mine)
    await server.start()
    base = f"http://{HOST}:{server.port}"
    try:
        async with RepositoryClient((HOST, server.port), credentials=mine, timeout_s=30) as peer:
            assert await peer.publish(Registration(("S1",), HOST, 9000))
            assert (await peer.lookup("S1")).port == 9000

        # The attacks the issue measured: a forged publisher, a stolen /unpublish, an anonymous reader.
        forged = {"s": "S1", "h": "198.18.0.66", "p": "9999", "ttl": "3600000"}
        assert (await _get(f"{base}/publish", **forged))[0] == 401
        async with RepositoryClient((HOST, server.port), credentials=Credentials(OTHER), timeout_s=30) as forger:
            assert not await forger.publish(Registration(("S1",), "198.18.0.66", 9999))
            assert not await forger.unpublish(Registration(("S1",), HOST, 9000))
        unpublish = {"s": "S1", "h": HOST, "p": "9000"}
        assert (await _get(f"{base}/unpublish", **unpublish))[0] == 401
        status, body = await _get(f"{base}/subscribe", s="S1")
        assert status == 401 and body["status"] == "error" and "read token" in body["error"]
        assert (await _get(f"{base}/health"))[0] == 200

        assert [(p.host, p.port) for p in server.registry.publishers("S1")] == [(HOST, 9000)]
        assert server.gate is not None and server.gate.refused.get("unsigned") == 2

        # A real unpublish, captured and sent again after the publisher registered anew, is refused.
        captured = mine.signed_headers("GET", "/unpublish", unpublish)
        assert (await _get(f"{base}/unpublish", captured, **unpublish))[0] == 200
        async with RepositoryClient((HOST, server.port), credentials=mine, timeout_s=30) as peer:
            assert await peer.publish(Registration(("S1",), HOST, 9000))
        status, body = await _get(f"{base}/unpublish", captured, **unpublish)
        assert status == 403 and "already used" in body["error"]
        assert len(server.registry.publishers("S1")) == 1
        status, metrics = 0, ""
        async with aiohttp.ClientSession() as session, session.get(
                f"{base}/metrics", headers=bearer(mine.read_token)) as response:
            status, metrics = response.status, await response.text()
        assert status == 200 and prometheus.value(metrics, "pan_auth_refused_total", reason="replayed") == 1
    finally:
        await server.stop()


async def test_without_a_secret_everything_is_open_as_before() -> None:
    server = RepositoryServer(HOST, 0)
    await server.start()
    try:
        base = f"http://{HOST}:{server.port}"
        assert (await _get(f"{base}/publish", s="S1", h=HOST, p="9000"))[0] == 200
        assert (await _get(f"{base}/subscribe", s="S1"))[0] == 200
        assert (await _get(f"{base}/unpublish", s="S1", h=HOST, p="9000"))[0] == 200
    finally:
        await server.stop()


# --- workers of a closed workflow, in one process --------------------------------------------------


async def test_workers_pull_from_each_other_with_the_token_and_refuse_anyone_without(tmp_path: Path) -> None:
    secret = _write(tmp_path / "pan.secret", SECRET)
    repository = RepositoryServer(HOST, free_port(), credentials=Credentials(SECRET))
    await repository.start()
    ingest = free_port()
    data = workflow_dict(repository.port, [forwarder("F", ["SENSOR4"], ingest_port=ingest, peer="p1"),
                                           repeater("R", ["SENSOR4"], 1, peer="p2")])
    path = tmp_path / "wf.json"
    path.write_bytes(orjson.dumps({**data, "auth": {"secret_file": secret.name}}))
    workflow = load_workflow(path)
    stop = asyncio.Event()
    peers = [asyncio.create_task(serve_peer(workflow, peer, stop)) for peer in ("p1", "p2")]
    token = Credentials(SECRET).read_token
    try:
        await wait_until(lambda: len(repository.registry.publishers("SENSOR4")) == 2, timeout_s=120)  # signed leases
        rows = [sensor_row(4, k).encode() for k in range(200)]
        await send_lines(HOST, ingest, rows, timeout_s=30)

        async def repeated() -> list[dict[str, Any]]:
            async with StreamSubscriber("SENSOR4", (HOST, repository.port), token=token,
                                        max_wait_ms=200) as subscriber:
                got: list[dict[str, Any]] = []
                while len(got) < len(rows):
                    got += (await asyncio.wait_for(subscriber.fetch(), 60)).tuples
                return got

        async def from_repeater() -> bool:
            listed = [p for p in repository.registry.publishers("SENSOR4") if p.rep]
            if not listed:
                return False
            status, body = await _get(f"http://{HOST}:{listed[0].port}/data", bearer(token), s="SENSOR4")
            return status == 200 and len(body["tuples"]) == len(rows)

        await wait_until(from_repeater, timeout_s=120, interval_s=0.1)  # the repeater pulled with the token
        assert [t["ts"] for t in await repeated()] == list(range(200))

        publisher = repository.registry.publishers("SENSOR4")[0]
        status, body = await _get(f"http://{HOST}:{publisher.port}/data", s="SENSOR4")
        assert status == 401 and "read token" in body["error"]
        assert (await _get(f"http://{HOST}:{publisher.port}/health"))[0] == 200
        async with StreamSubscriber("SENSOR4", (HOST, repository.port), max_wait_ms=200) as anonymous:
            with pytest.raises(SubscriberError, match="refused"):
                await asyncio.wait_for(anonymous.fetch(), 60)  # a clear failure, not a silent retry forever
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*peers, return_exceptions=True), 60)
        await repository.stop()


# --- the commands ----------------------------------------------------------------------------------


async def _pan(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """``pan ARGS`` to its end: exit code, stdout, stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pan", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.process
async def test_pan_run_with_a_secret_serves_token_holders_only(processes: Any, tmp_path: Path) -> None:
    _write(tmp_path / "pan.secret", SECRET + b"\n")
    repo_port = free_port()
    spec = forwarder("F", ["SENSOR4"], peer="p1")
    path = processes.write_workflow({**workflow_dict(repo_port, [spec]), "auth": {"secret_file": "pan.secret"}})
    processes.pan("run", str(path), log_name="run")
    token = Credentials(SECRET).read_token
    async with RepositoryClient((HOST, repo_port), token=token, timeout_s=30) as repository:
        await repository.wait_for_publishers(["SENSOR4"], 120)
    await send_lines(HOST, spec["params"]["ingest_port"], [sensor_row(4, k).encode() for k in range(50)],
                     timeout_s=30)

    code, out, err = await _pan("token", str(path))
    assert code == 0 and out.strip() == token
    (tmp_path / "token").write_text(out)
    subscribe = ["subscribe", "SENSOR4", "--repository", f"{HOST}:{repo_port}", "--count", "50"]
    code, out, err = await _pan(*subscribe, "--token-file", str(tmp_path / "token"))
    assert code == 0, err
    assert [orjson.loads(line)["ts"] for line in out.splitlines()] == list(range(50))
    code, out, _ = await _pan(*subscribe, env={"PAN_TOKEN": token})
    assert code == 0 and len(out.splitlines()) == 50

    code, out, err = await _pan(*subscribe)  # no token: one clear line, not a hang
    assert code == 1 and out == "" and "refused" in err and "read token" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.process
async def test_pan_run_with_an_unusable_secret_starts_nothing(tmp_path: Path) -> None:
    data = {**workflow_dict(free_port(), [forwarder("F", ["SENSOR4"], peer="p1")]),
            "auth": {"secret_file": "missing.secret"}}
    path = tmp_path / "wf.json"
    path.write_bytes(orjson.dumps(data))
    code, _, err = await _pan("run", str(path))
    assert code == 2 and "missing.secret" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    code, _, err = await _pan("token", str(path))
    assert code == 2 and "missing.secret" in err


def test_binding_beyond_loopback_without_a_secret_is_warned(capsys: pytest.CaptureFixture[str]) -> None:
    from pan.commands.runtime import warn_if_open

    warn_if_open(["127.0.0.1", "localhost", "::1"], "pan run")
    assert capsys.readouterr().err == ""
    warn_if_open(["127.0.0.1", "198.18.0.7", "0.0.0.0"], "pan run")
    err = capsys.readouterr().err
    assert "warning" in err and "198.18.0.7" in err and "0.0.0.0" in err and "127.0.0.1" not in err
