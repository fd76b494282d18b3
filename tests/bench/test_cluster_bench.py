"""`pan bench cluster`: where its services run and which proxies a host needs (quick), that the one-machine
reference starts its services in as many sessions as the cluster (process), and a `--quick` run on a
namespace cluster (root, slow: ~2.5 min on a loaded 2-core machine)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import psutil
import pytest

from benchmarks import cluster_bench
from tests.bench.test_bench_cli import bench

ROOT = Path(__file__).resolve().parents[2]
ADDRESSES = {f"h{k}": f"198.18.7.{k + 1}" for k in range(1, 6)}


def workflow() -> dict:
    return json.loads(cluster_bench.WORKFLOW.read_text())


def test_each_worker_runs_on_its_peers_host_or_on_any_address_behind_the_proxies() -> None:
    direct = cluster_bench.placed(workflow(), ADDRESSES, proxied=False)
    assert direct["repository"]["host"] == ADDRESSES["h1"]
    assert {w["peer"]: w["host"] for w in direct["workers"]} == {
        peer: ADDRESSES[host] for peer, host in cluster_bench.PLACES.items()}
    proxied = cluster_bench.placed(workflow(), ADDRESSES, proxied=True)
    assert {w["host"] for w in proxied["workers"]} == {"0.0.0.0"} and proxied["repository"]["host"] == "0.0.0.0"
    assert [w["port"] for w in proxied["workers"]] == [w["port"] for w in workflow()["workers"]]


def test_a_hosts_sidecar_proxies_every_service_of_the_other_hosts_and_none_of_its_own() -> None:
    data = workflow()
    every = cluster_bench.services(data)
    ports = [data["repository"]["port"], *(w["port"] for w in data["workers"]),
             *(w["params"]["ingest_port"] for w in data["workers"] if "ingest_port" in w.get("params", {}))]
    assert sorted(p for host_ports in every.values() for p in host_ports) == sorted(ports)
    client = cluster_bench.routes(data, ADDRESSES, "h5")
    assert sorted(r["port"] for r in client) == sorted(ports)
    peer1 = cluster_bench.routes(data, ADDRESSES, "h2")
    assert {r["port"] for r in peer1}.isdisjoint(every["h2"])
    assert all(r["host"] == ADDRESSES[h] for h, host_ports in every.items() for r in peer1 if r["port"] in host_ports)


def test_bad_options_are_one_line() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    cluster_bench.add_arguments(parser)
    assert cluster_bench.run(parser.parse_args(["--latencies", "ten"])) == 2
    assert cluster_bench.run(parser.parse_args(["--reps", "0"])) == 2


async def service_sessions(run: cluster_bench.WorkflowRun, timeout_s: float) -> list[int]:
    """The session of the repository and of every peer process (a launcher's child), once all peers exist."""
    deadline = time.monotonic() + timeout_s
    repository, *launchers = run.children
    while True:
        peers = [p for launcher in launchers for p in psutil.Process(launcher.pid).children()]
        if len(peers) == len(launchers) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    assert len(peers) == len(launchers), "every `pan run --peer` starts its peer"
    return [os.getsid(repository.pid), *(os.getsid(p.pid) for p in peers)]


@pytest.mark.process
@pytest.mark.timeout(300)
async def test_the_one_machine_reference_gives_each_hosts_services_a_session_of_their_own(tmp_path: Path) -> None:
    """The kernel's autogroup scheduler shares CPU out per session: one `pan run` holding every peer got a
    quarter of the cluster's CPU share on a loaded machine, and the reference came out slower than the cluster."""
    from pan.workflow.parser import on_free_ports

    run = cluster_bench.WorkflowRun(None, cluster_bench.Condition("one machine", cluster=False), tmp_path)
    data = on_free_ports(workflow())
    try:
        await run.start(data)
        sessions = await service_sessions(run, timeout_s=120)
    finally:
        await run.stop()
    assert len(set(sessions)) == len(cluster_bench.services(data)) == len(sessions)
    assert os.getsid(0) not in sessions


@pytest.mark.heavy
@pytest.mark.timeout(900)
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_cluster_quick_measures_every_condition_against_one_machine() -> None:
    summary = bench("cluster", "--quick", timeout=800)
    if "skipped" in summary:
        pytest.skip(summary["skipped"])
    conditions = summary["conditions"]
    assert list(conditions) == ["one machine", "cluster", "cluster +10 ms"]
    for entry in conditions.values():
        assert entry["tuples_median"] > 0 and entry["p50_ms_median"] is not None
        assert entry["p50_ms_min"] <= entry["p50_ms_median"] <= entry["p50_ms_max"]
    assert conditions["one machine"]["ratio_to_one_machine"] == 1.0
    assert summary["load_avg"] and summary["load_avg_at_end"]
