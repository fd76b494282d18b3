"""The acceptance of `pan deploy` on a namespace cluster of six hosts (tests/support/cluster.py), over real SSH.

- The 6-peer full game on h2-h5 with the repository on h1, replayed from h6 (`pan replay --attach`: the
  forwarders get their rows over TCP from h6), records the same bytes as `pan replay` on one machine, and
  `pan deploy down` leaves no process on any host.
- Sensor forwarding with a repeater on each of h3 and h4 (workflows/forwarding_2_repeaters_inventory.json: the
  6-peer full game repeats no stream): every process of h3 killed and its namespace removed mid-run, `pan deploy
  status` names h3 as down in one line, subscribers that pulled from h3 fail over without losing a tuple, and
  the other hosts keep running.

Costs measured at load 15-20 on 2 cores (other sessions' jobs): the cluster and a 9-second match generated
and split with Spark 65 s; the full-game test 266 s (the install of five venvs, up, the replay on the cluster,
down, the same replay on one machine); the failover test 85 s (an update install, up, two feeds, status,
down): 417 s in all (with 0.3 minutes of match it was 1063 s).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import ROOT, sensor_row
from tests.support.cluster import left_in, namespace_cluster, pan, recorded_pids, write_inventory

pytestmark = [pytest.mark.heavy, pytest.mark.timeout(1800)]

HOSTS = 6  # h1 repository, h2-h5 peers, h6 the replay's (or the subscribers') host
FIRST_ROWS = 40  # per sensor stream, before h3 is killed
MORE_ROWS = 60  # after


@pytest.fixture(scope="module")
def six_hosts() -> Iterator[Any]:
    with namespace_cluster("g", HOSTS) as state:
        yield state


@pytest.fixture(scope="module")
def split_match(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short generated match (9 s of play in one half: the exact generator, so no break between halves,
    through which the whole-game heat maps would write gigabytes), split per sensor: the replays' input."""
    root = tmp_path_factory.mktemp("match")
    pan("generate", "--exact", "--minutes", "0.15", "--seed", "14", "--out", str(root / "game"))
    pan("split", str(root / "game" / "full-game"), "--out", str(root / "split"))
    return root / "split"


@pytest.fixture(scope="module")
def hosts_root(six_hosts: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The hosts' remote folders (one per host, all on this machine's file system)."""
    return tmp_path_factory.mktemp("deploy6") / "hosts"


def install(six_hosts: Any, hosts_root: Path, template: str, workflow: str) -> Path:
    inventory = write_inventory(hosts_root.parent / template, six_hosts.name, hosts_root, ROOT / "workflows" / workflow,
                                template=template)
    pan("deploy", "install", str(inventory))
    return inventory


def assert_nothing_left(six_hosts: Any, hosts_root: Path, pids: list[int], skip: str | None = None) -> None:
    assert pids and not [p for p in pids if psutil.pid_exists(p)]
    assert [p for p in hosts_root.glob("*/run/*.pid") if p.parts[-3] != skip] == []
    for host in six_hosts.hosts:
        if host.name != skip:
            assert left_in(host.namespace) == [], host.name


def outputs(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.jsonl"))}


def test_full_game_on_four_hosts_replayed_from_a_fifth_records_what_one_machine_does(
        six_hosts: Any, hosts_root: Path, split_match: Path, tmp_path: Path) -> None:
    inventory = str(install(six_hosts, hosts_root, "full_game_6_peers_inventory.json", "full_game_6_peers.json"))
    up = pan("deploy", "up", inventory, timeout=600)
    assert up.stdout.count("started") == 7, up.stdout  # the repository and six peers
    try:
        on_cluster = tmp_path / "cluster"
        deployed = hosts_root / "h2" / "workflow.json"
        assert json.loads(deployed.read_text())["repository"]["host"] == six_hosts.host("h1").address
        replay = pan("replay", str(deployed), "--attach", "--data", str(split_match), "--record", str(on_cluster),
                     namespace=six_hosts.host("h6").namespace, timeout=1200, check=False)
        assert replay.returncode == 0, (replay.stdout[-2000:], replay.stderr[-3000:])
    finally:
        pids = recorded_pids(hosts_root)
        down = pan("deploy", "down", inventory, timeout=300)
    assert down.stdout.count("stopped") == 7, down.stdout
    assert_nothing_left(six_hosts, hosts_root, pids)

    alone = tmp_path / "alone"
    pan("replay", str(ROOT / "workflows" / "full_game_6_peers.json"), "--free-ports", "--data", str(split_match),
        "--record", str(alone), timeout=1200)
    expected, got = outputs(alone), outputs(on_cluster)
    assert sum(len(data) for data in expected.values()) > 0
    assert got.keys() == expected.keys()
    assert [name for name in expected if got[name] != expected[name]] == []


def feed(address: str, port: int, streams: list[int], first: int, count: int) -> None:
    rows = [sensor_row(sid, 10**12 + k * 10**9, k) for k in range(first, first + count) for sid in streams]
    with socket.create_connection((address, port), timeout=30) as s:
        s.sendall("".join(line + "\n" for line in rows).encode())


async def follow_through_a_kill(workflow: dict[str, Any], kill: Any, feed_more: Any) -> dict[str, Any]:
    """Subscribers of every stream read FIRST_ROWS, then ``kill()``, ``feed_more()``, and read the rest."""
    import aiohttp

    from pan.input.subscriber import StreamSubscriber

    repository = f"{workflow['repository']['host']}:{workflow['repository']['port']}"
    streams = workflow["workers"][0]["params"]["inter_pan_inputs"]
    got: dict[str, list[int]] = {s: [] for s in streams}
    sources: dict[str, list[str]] = {s: [] for s in streams}
    async with aiohttp.ClientSession() as session:
        subscribers = {s: StreamSubscriber(s, repository, session=session, max_wait_ms=300, request_timeout_s=5)
                       for s in streams}

        async def read(stream: str, until: int) -> None:
            subscriber = subscribers[stream]
            async for batch in subscriber.batches():
                got[stream].extend(t["i"] for t in batch)
                source = subscriber.source.endpoint if subscriber.source else None
                if source and source not in sources[stream]:
                    sources[stream].append(source)
                if len(got[stream]) >= until:
                    return

        async with asyncio.timeout(300):
            await asyncio.gather(*(read(s, FIRST_ROWS) for s in streams))
            before = {s: subscribers[s].source.endpoint for s in streams if subscribers[s].source}
            await asyncio.to_thread(kill)
            await asyncio.to_thread(feed_more)
            await asyncio.gather(*(read(s, FIRST_ROWS + MORE_ROWS) for s in streams))
        failovers = {s: subscribers[s].stats.failovers for s in streams}
        missed = {s: subscribers[s].stats.missed for s in streams if subscribers[s].stats.missed}
        for subscriber in subscribers.values():
            await subscriber.close()
    return {"got": got, "before": before, "sources": sources, "failovers": failovers, "missed": missed}


def kill_host(namespace: str) -> None:
    """Every process of the host (its peers and its sshd), then its namespace with its end of the link."""
    from pan.deploy import netns

    for pid in netns.pids_in(namespace):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    netns.sh("ip", "netns", "del", namespace)


def test_a_host_killed_mid_run_is_shown_down_and_its_subscribers_fail_over(
        six_hosts: Any, hosts_root: Path) -> None:
    inventory = str(install(six_hosts, hosts_root, "forwarding_2_repeaters_inventory.json",
                            "forwarding_2_repeaters.json"))
    workflow = json.loads((hosts_root / "h2" / "workflow.json").read_text())
    forwarder, repeater1 = workflow["workers"][0], workflow["workers"][1]
    victim = six_hosts.host("h3")
    assert repeater1["host"] == victim.address
    sids = [int(s.removeprefix("SENSOR")) for s in forwarder["params"]["inter_pan_inputs"]]
    ingest = (forwarder["host"], forwarder["params"]["ingest_port"])
    pan("deploy", "up", inventory, timeout=600)
    try:
        feed(*ingest, sids, 0, FIRST_ROWS)
        seen = asyncio.run(follow_through_a_kill(workflow, lambda: kill_host(victim.namespace),
                                                 lambda: feed(*ingest, sids, FIRST_ROWS, MORE_ROWS)))
        status = pan("deploy", "status", inventory, timeout=300, check=False)
        as_json = json.loads(pan("deploy", "status", inventory, "--json", timeout=300, check=False).stdout)
    finally:
        pids = recorded_pids(hosts_root)
        down = pan("deploy", "down", inventory, timeout=300, check=False)

    on_victim = f"{victim.address}:{repeater1['port']}"
    moved = [s for s, endpoint in seen["before"].items() if endpoint == on_victim]
    assert moved, seen["before"]  # some subscribers pulled from h3's repeater when it died ...
    assert all(seen["failovers"][s] >= 1 and seen["sources"][s][-1] != on_victim for s in moved)
    everything = list(range(FIRST_ROWS + MORE_ROWS))
    assert seen["missed"] == {} and all(got == everything for got in seen["got"].values())  # ... and lost nothing

    assert status.returncode == 1 and "Traceback" not in status.stderr + status.stdout
    problems = status.stderr.strip().splitlines()
    assert len(problems) == 1 and problems[0].startswith("h3: host down: "), status.stderr
    rows = {r["process"]: r for r in as_json["rows"]}
    assert rows["peer2"]["health"] == "host down" and rows["peer2"]["alive"] is None
    assert all(rows[p]["alive"] and rows[p]["health"] == "ok" for p in ("repository", "peer1", "peer3")), rows
    assert rows["peer1"]["streams"] == len(sids) and rows["peer3"]["streams"] == len(sids)

    assert down.returncode == 1 and "Traceback" not in down.stderr + down.stdout
    assert len([line for line in down.stdout.splitlines() if line.startswith("h3")]) == 1, down.stdout
    assert down.stdout.count("stopped") == 3, down.stdout
    assert_nothing_left(six_hosts, hosts_root, pids, skip="h3")  # h3's processes died with it
