"""`pan cluster`: namespaces with their own sshd on a bridge, and nothing left after `down` (real namespaces)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.support.cluster import pan, skip_without_cluster

pytestmark = pytest.mark.process


def links() -> str:
    from pan.deploy import netns

    return netns.sh("ip", "-o", "link", "show").stdout


def test_cluster_up_gives_each_host_its_address_and_sshd_and_down_removes_everything() -> None:
    skip_without_cluster()
    import asyncssh

    from pan.deploy import cluster, netns

    name = f"c{os.getpid() % 100000}"
    state = cluster.up(name, 2)
    try:
        assert {h.namespace for h in state.hosts} <= netns.namespaces()

        async def address_seen_over_ssh(host: cluster.Host) -> str:
            async with asyncssh.connect(host.address, username="root", client_keys=[str(state.client_key)],
                                        known_hosts=str(state.known_hosts), connect_timeout=20) as conn:
                return str((await conn.run("ip -4 -o addr show dev eth0", check=True)).stdout)

        for host in state.hosts:
            assert host.address.startswith("198.1")
            assert f"inet {host.address}/24" in asyncio.run(address_seen_over_ssh(host))
        rows = pan("cluster", "status", "--name", name).stdout
        assert rows.count("sshd alive") == 2, rows
    finally:
        removed = cluster.down(name)
    assert not {h.namespace for h in state.hosts} & netns.namespaces()
    assert not any(cluster._alive(h.sshd_pid) for h in state.hosts if h.sshd_pid)
    assert state.bridge not in links() and state.hosts[0].veth not in links()
    assert f"bridge {state.bridge}" in removed
    assert not Path(state.folder).exists()


def test_down_after_a_crash_removes_what_the_state_file_lists() -> None:
    """A cluster whose sshd died and one of whose namespaces is already gone (as after a crash) still goes."""
    skip_without_cluster()
    from pan.deploy import cluster, netns

    name = f"k{os.getpid() % 100000}"
    state = cluster.up(name, 2)
    os.kill(state.hosts[0].sshd_pid, 9)
    netns.sh("ip", "netns", "del", state.hosts[1].namespace)
    cluster.down(name)
    assert not {h.namespace for h in state.hosts} & netns.namespaces()
    assert state.bridge not in links()
    assert cluster.load_state(name) is None


def test_cluster_refuses_a_bad_name_with_one_line() -> None:
    skip_without_cluster()
    done = pan("cluster", "up", "--name", "no/such", check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().startswith("pan cluster up: cluster name")
