"""Inventories and the bundle `pan deploy install` stages (no SSH, no namespaces: quick)."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT

pytest.importorskip("asyncssh", reason="pan deploy needs the deploy extra")

from pan.deploy import install
from pan.deploy.inventory import InventoryError, load_inventory

WORKFLOW = ROOT / "workflows" / "full_game_3_peers.json"


def inventory(tmp_path: Path, **changes: object) -> Path:
    data = {"workflow": str(WORKFLOW), "ssh": {"user": "pan", "key": "id"},
            "hosts": {"a": {"address": "198.18.9.2", "dir": "/srv/a"}, "b": {"address": "198.18.9.3", "dir": "/srv/b"}},
            "repository": "a", "peers": {"peer1": "a", "peer2": "b", "peer3": "b"}, **changes}
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(data))
    return path


def test_the_deployed_workflow_binds_each_worker_on_its_hosts_address(tmp_path: Path) -> None:
    inv = load_inventory(inventory(tmp_path))
    assert inv.hosts["a"].ssh.key == tmp_path / "id" and inv.hosts["b"].ssh.user == "pan"
    deployed = inv.deployed_workflow(inv.workflow)
    assert deployed["repository"]["host"] == "198.18.9.2"
    expected = {"peer1": "198.18.9.2", "peer2": "198.18.9.3", "peer3": "198.18.9.3"}
    assert {w["peer"]: w["host"] for w in deployed["workers"]} == expected
    assert [w["port"] for w in deployed["workers"]] == [w["port"] for w in inv.workflow["workers"]]


def test_every_problem_of_an_inventory_is_one_line(tmp_path: Path) -> None:
    path = inventory(tmp_path, repository="z", peers={"peer1": "a", "peer2": "q", "nope": "a"},
                     hosts={"a": {"address": "198.18.9.2", "dir": "relative"}, "b": {"dir": "/x", "color": 1}},
                     files=["missing.json"])
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    problems = caught.value.problems
    assert all(p.startswith(str(path)) for p in problems)
    text = "\n".join(problems)
    for fragment in ("hosts.a: needs a 'dir'", "hosts.b: unknown key 'color'", "hosts.b: needs an 'address'",
                     "the workflow has no peer 'nope'", "peer peer2 is placed on host 'q'", "repository: must name",
                     "missing.json does not exist"):
        assert fragment in text, text


def bundled(tmp_path: Path, workflow: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
            ) -> tuple[Any, Path, install.Bundle]:
    """``workflow`` written as wf.json, its inventory, and the bundle `pan deploy install` stages (no wheel)."""
    (tmp_path / "wf.json").write_text(json.dumps(workflow))
    inv = load_inventory(inventory(tmp_path, workflow="wf.json"))
    stage = tmp_path / "stage"
    stage.mkdir()
    monkeypatch.setattr(install, "build_wheel", lambda project: tmp_path / "pan.whl")
    monkeypatch.setattr(install, "wheelhouse", lambda: [])
    return inv, stage, install.bundle(inv, inv.workflow_path, inv.workflow, ROOT, stage)


def test_a_secret_file_is_staged_with_mode_0600_and_the_workflow_points_at_it(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    secret = tmp_path / "my.secret"
    secret.write_text("s" * 32)
    workflow = {**json.loads(WORKFLOW.read_text()), "auth": {"secret_file": "my.secret"}}
    inv, stage, bundle = bundled(tmp_path, workflow, monkeypatch)
    assert bundle.secret is not None and bundle.secret.read_text() == "s" * 32
    assert stat.S_IMODE(bundle.secret.stat().st_mode) == 0o600
    assert json.loads(bundle.workflow.read_text())["auth"] == {"secret_file": install.SECRET_NAME}

    monkeypatch.setenv("PAN_TEST_SECRET", "e" * 32)
    workflow["auth"] = {"secret_env": "PAN_TEST_SECRET"}
    (tmp_path / "wf.json").write_text(json.dumps(workflow))
    bundle = install.bundle(load_inventory(inventory(tmp_path, workflow="wf.json")), tmp_path / "wf.json", workflow,
                            ROOT, stage)
    assert bundle.secret is not None and bundle.secret.read_text() == "e" * 32
    monkeypatch.delenv("PAN_TEST_SECRET")
    with pytest.raises(install.InstallError, match="PAN_TEST_SECRET is not set"):
        install.bundle(inv, tmp_path / "wf.json", workflow, ROOT, stage)


def test_the_wheelhouse_needs_every_runtime_requirement_and_no_extra() -> None:
    needed = install.requirements()
    assert {"aiohttp", "orjson", "numpy"} <= set(needed)
    assert "pyspark" not in needed and "pytest" not in needed


def test_tls_files_are_made_per_host_address_and_staged_under_the_deployed_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("cryptography", reason="making certificates needs the tls extra")
    inv = load_inventory(inventory(tmp_path))
    tls = install.make_certs(inv, tmp_path / "certs")
    workflow = {**json.loads(WORKFLOW.read_text()), "tls": tls}
    inv, stage, bundle = bundled(tmp_path, workflow, monkeypatch)
    assert bundle.tls is not None
    assert bundle.tls.ca.read_bytes() == (tmp_path / "certs" / "ca.pem").read_bytes()
    assert sorted(bundle.tls.certs) == ["198.18.9.2", "198.18.9.3"]
    for address, (cert, key) in bundle.tls.certs.items():
        assert cert.read_bytes() == (tmp_path / "certs" / f"{address}.pem").read_bytes()
        assert key.name == f"{address}.key" and stat.S_IMODE(key.stat().st_mode) == 0o600
    deployed = json.loads(bundle.workflow.read_text())["tls"]
    assert deployed == {"ca": "tls/ca.pem", "cert": "tls/{host}.pem", "key": "tls/{host}.key"}

    (tmp_path / "certs" / "198.18.9.3.key").unlink()
    with pytest.raises(install.InstallError, match=r"TLS files are missing: .*198\.18\.9\.3\.key"):
        install.bundle(inv, inv.workflow_path, inv.workflow, ROOT, stage)


@pytest.mark.parametrize(("argv", "host", "extra"), [
    (["INV", "--host", "h5", "--data", "split", "--", "--speedup", "0"], "h5", ["--speedup", "0"]),
    (["--host", "h5", "INV", "--data", "split", "--", "--wtt-master"], "h5", ["--wtt-master"]),
    (["INV", "--data", "split", "--host", "h2"], "h2", []),
])
def test_deploy_simulate_takes_its_options_before_or_after_the_inventory(argv: list[str], host: str,
                                                                          extra: list[str]) -> None:
    import argparse

    from pan.commands import deploy

    parser = argparse.ArgumentParser()
    deploy.register(parser.add_subparsers())
    args = parser.parse_args(["deploy", "simulate", *argv])
    assert deploy._split_simulate_options(args) is None
    assert (args.inventory, args.host, args.data, args.extra) == ("INV", host, Path("split"), extra)


def test_deploy_simulate_without_host_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from pan.commands import deploy

    parser = argparse.ArgumentParser()
    deploy.register(parser.add_subparsers())
    args = parser.parse_args(["deploy", "simulate", "INV", "--data", "split"])
    assert deploy.cmd_simulate(args) == 2
    assert capsys.readouterr().err.strip() == "pan deploy simulate: --host required"
