"""A namespace cluster for the tests (pan/deploy/cluster.py) and a 3-peer full game installed on it.

Module-scoped, so that their teardown counts for the slow tests of the module: the cluster takes a second, an
install about 40 s (one venv per host, offline from the wheelhouse), so the deploy tests share one of each.
Tests that need them skip with the reason when this machine cannot make namespaces (not root, no iproute2,
no sshd).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT

HOSTS = 5  # h1 repository, h2-h4 peers, h5 a client


def pan(*args: str, timeout: float = 600, check: bool = True, namespace: str | None = None
        ) -> subprocess.CompletedProcess[str]:
    """``pan ARGS`` (in ``namespace``, i.e. on that cluster host, if given), its output captured."""
    where = ["ip", "netns", "exec", namespace] if namespace else []
    done = subprocess.run([*where, sys.executable, "-m", "pan", *args], capture_output=True, text=True,
                          timeout=timeout, check=False, cwd=ROOT)
    if check:
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-3000:])
    return done


def skip_without_cluster() -> None:
    pytest.importorskip("asyncssh", reason="pan deploy needs the deploy extra (asyncssh)")
    from pan.deploy import cluster

    reason = cluster.problem()
    if reason:
        pytest.skip(f"no namespace cluster here: {reason}")


@contextlib.contextmanager
def namespace_cluster(prefix: str, hosts: int) -> Iterator[Any]:
    """A cluster of ``hosts`` namespaces with sshd, removed at the end (also its namespaces' processes), even
    when the test fails."""
    skip_without_cluster()
    from pan.deploy import cluster

    name = f"{prefix}{os.getpid() % 100000}"
    try:
        yield cluster.up(name, hosts)
    finally:
        cluster.down(name)


@pytest.fixture(scope="module")
def test_cluster() -> Iterator[Any]:
    """A cluster of HOSTS namespaces with sshd, removed at the end (also its namespaces' processes)."""
    with namespace_cluster("t", HOSTS) as state:
        yield state


def write_inventory(path: Path, cluster_name: str, remote_root: Path, workflow: Path, *,
                    template: str = "full_game_3_peers_inventory.json", **changes: Any) -> Path:
    """A shipped inventory (``template`` in workflows/), on ``cluster_name`` with remote folders under
    ``remote_root``."""
    data = json.loads((ROOT / "workflows" / template).read_text())
    data.update(cluster=cluster_name, workflow=str(workflow),
                hosts={name: {"dir": str(remote_root / name)} for name in data["hosts"]})
    data.update(changes)
    path.write_text(json.dumps(data))
    return path


@pytest.fixture(scope="module")
def installed(test_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The 3-peer full game installed on h1-h4 of the test cluster: its inventory and the install's output."""
    root = tmp_path_factory.mktemp("deploy")
    inventory = write_inventory(root / "inventory.json", test_cluster.name, root / "hosts",
                                ROOT / "workflows" / "full_game_3_peers.json")
    done = pan("deploy", "install", str(inventory))
    return {"inventory": inventory, "root": root, "install": done}


def recorded_pids(root: Path) -> list[int]:
    """The PIDs `pan deploy up` recorded on the hosts whose folders are under ``root``."""
    return [int(p.read_text()) for p in root.glob("*/run/*.pid")]


def left_in(namespace: str) -> list[str]:
    """The names of the processes that run in ``namespace`` but its sshd."""
    import psutil

    from pan.deploy import netns

    names = []
    for pid in netns.pids_in(namespace):
        try:
            names.append(psutil.Process(pid).name())
        except psutil.NoSuchProcess:
            continue
    return [n for n in names if n != "sshd"]
