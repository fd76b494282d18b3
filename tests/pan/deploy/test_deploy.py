"""`pan deploy` of the 3-peer full game onto a namespace cluster over real SSH (tests/support/cluster.py).

Costs measured at load ~20 on 2 cores (other jobs): the module's install 104 s (4 venvs made in parallel,
offline from the wheelhouse), up/status/subscribe/logs -f/simulate/down 111 s, the port test 15 s, the
bad-inventory test 63 s (an update install of h1, SSH timeouts), the TLS test 136 s (an update install, up,
HTTPS checks, down): 430 s in all. At load 10-12, before the TLS, logs -f and simulate checks, it was ~90 s.
"""

from __future__ import annotations

import http.client
import json
import signal
import socket
import stat
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest

from pan.deploy import cluster, netns
from tests.conftest import ROOT, sensor_row
from tests.support.cluster import pan, write_inventory

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROWS = 200
SIMULATED = 50


def deployed(installed: dict[str, Any]) -> dict[str, Any]:
    """The workflow as the hosts run it (the install wrote it to every host)."""
    return json.loads((installed["root"] / "hosts" / "h2" / "workflow.json").read_text())


def recorded_pids(installed: dict[str, Any]) -> list[int]:
    return [int(p.read_text()) for p in (installed["root"] / "hosts").glob("*/run/*.pid")]


def test_install_puts_the_workflow_on_every_host_with_its_hosts_addresses(installed: dict[str, Any],
                                                                          test_cluster: Any) -> None:
    lines = installed["install"].stdout.splitlines()
    assert sorted(line.split(":")[0] for line in lines) == ["h1", "h2", "h3", "h4"]
    workflow = deployed(installed)
    addresses = {h.name: h.address for h in test_cluster.hosts}
    assert workflow["repository"]["host"] == addresses["h1"]
    peer_host = {"peer1": "h2", "peer2": "h3", "peer3": "h4"}
    assert all(w["host"] == addresses[peer_host[w["peer"]]] for w in workflow["workers"])
    for name in ("h1", "h2", "h3", "h4"):
        assert (installed["root"] / "hosts" / name / "venv" / "bin" / "pan").exists()


def test_up_status_subscribe_from_another_host_and_down(installed: dict[str, Any], test_cluster: Any,
                                                        tmp_path: Path) -> None:
    inventory = str(installed["inventory"])
    up = pan("deploy", "up", inventory, timeout=300)
    assert up.stdout.count("started") == 4, up.stdout
    try:
        status = json.loads(pan("deploy", "status", inventory, "--json").stdout)
        assert status["errors"] == []
        rows = {r["process"]: r for r in status["rows"]}
        assert set(rows) == {"repository", "peer1", "peer2", "peer3"}
        assert all(r["alive"] and r["health"] == "ok" for r in rows.values()), rows
        assert all(rows[p]["streams"] > 0 for p in ("peer1", "peer2", "peer3")), rows

        # Rows into peer1's forwarder on h2; a subscriber in h5's namespace reads them back through h1's repository.
        workflow = deployed(installed)
        forwarder = next(w for w in workflow["workers"] if "SENSOR4" in w["params"].get("inter_pan_inputs", []))
        sent = [sensor_row(4, 10**12 + k * 10**9, k) for k in range(ROWS)]
        with socket.create_connection((forwarder["host"], forwarder["params"]["ingest_port"]), timeout=30) as s:
            s.sendall("".join(line + "\n" for line in sent).encode())
        client = test_cluster.host("h5")
        repository = f"{workflow['repository']['host']}:{workflow['repository']['port']}"
        done = subprocess.run(["ip", "netns", "exec", client.namespace, sys.executable, "-m", "pan", "subscribe",
                               "SENSOR4", "--repository", repository, "--count", str(ROWS)],
                              capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        got = [json.loads(line) for line in done.stdout.splitlines()]
        tuples = [item for item in got if "i" in item]
        assert [t["ts"] for t in tuples] == [10**12 + k * 10**9 for k in range(ROWS)]

        logs = pan("deploy", "logs", inventory, "peer1", "-n", "50").stdout
        assert "running" in logs
        follow_a_log_until_interrupted(inventory)
        simulate_from_a_host(inventory, workflow, tmp_path)
        simulate_across_hosts(inventory, tmp_path)
    finally:
        pids = recorded_pids(installed)
        down = pan("deploy", "down", inventory, timeout=300)
    assert down.stdout.count("stopped") == 4, down.stdout
    assert pids and not [p for p in pids if psutil.pid_exists(p)]
    assert recorded_pids(installed) == []
    for host in test_cluster.hosts:  # only each host's sshd is left in its namespace
        left = [psutil.Process(p).name() for p in netns.pids_in(host.namespace) if psutil.pid_exists(p)]
        assert set(left) <= {"sshd"}, (host.name, left)


def follow_a_log_until_interrupted(inventory: str) -> None:
    """`logs -f` prints the log and then waits for more; SIGINT ends it at once, without a traceback (and the
    remote tail with it: the test's final check finds no process but sshd on the hosts)."""
    follower = subprocess.Popen([sys.executable, "-m", "pan", "deploy", "logs", inventory, "repository", "-f",
                                 "-n", "5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert follower.stdout is not None
        first = follower.stdout.readline()  # blocks until the follow has printed a line of the log
        assert first.strip(), first
        follower.send_signal(signal.SIGINT)
        _, err = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert follower.returncode in (0, 130) and "Traceback" not in err, err


def simulate_from_a_host(inventory: str, workflow: dict[str, Any], tmp_path: Path) -> None:
    """`pan deploy simulate` copies a split folder to h4 (peer3's host) and feeds the deployed forwarder from there."""
    forwarder = next(w for w in workflow["workers"] if "SENSOR13" in w["params"].get("inter_pan_inputs", []))
    stamps = [10**13 + k * 5 * 10**9 for k in range(SIMULATED)]
    folder = tmp_path / "split"
    folder.mkdir()
    (folder / "SENSOR13.csv").write_text("".join(sensor_row(13, ts, k) + "\n" for k, ts in enumerate(stamps)))
    done = pan("deploy", "simulate", inventory, "--host", "h4", "--data", str(folder), "--", "--speedup", "0",
               timeout=300)
    summary = json.loads(done.stdout[done.stdout.rindex("\n{\n") if "\n{\n" in done.stdout else 0:])
    stream = summary["streams"]["SENSOR13"]
    assert stream["sent"] == SIMULATED and stream["lost"] == 0, stream
    assert stream["receiver"] == f"{forwarder['host']}:{forwarder['params']['ingest_port']}"


def simulate_across_hosts(inventory: str, tmp_path: Path) -> None:
    """`pan deploy simulate --slaves`: h4 is the WeakTrueTime master, h3 its slave; each feeds one of the two
    sensors (its share), from one start time, and says which clock role it had."""
    folder = tmp_path / "split-two"
    folder.mkdir()
    for sid in (14, 16):
        (folder / f"SENSOR{sid}.csv").write_text(
            "".join(sensor_row(sid, 10**13 + k * 5 * 10**9, k) + "\n" for k in range(SIMULATED)))
    done = pan("deploy", "simulate", inventory, "--host", "h4", "--slaves", "h3", "--data", str(folder), "--",
               "--speedup", "0", timeout=300)
    summaries = {}
    for host in ("h4", "h3"):
        text = "".join(line.removeprefix(f"{host}: ") + "\n" for line in done.stdout.splitlines()
                       if line.startswith(f"{host}: "))
        summaries[host], end = json.JSONDecoder().raw_decode(text, text.index("{\n"))
        assert not text[end:].strip(), (host, text[end:])  # nothing after the summary: no failure line
    assert summaries["h4"]["wtt"]["role"] == "master" and summaries["h3"]["wtt"]["role"] == "slave"
    fed = {stream: (host, s["sent"], s["lost"]) for host, summary in summaries.items()
           for stream, s in summary["streams"].items()}
    assert fed == {"SENSOR14": ("h4", SIMULATED, 0), "SENSOR16": ("h3", SIMULATED, 0)}, fed


def test_up_refuses_a_port_in_use_and_starts_nothing(installed: dict[str, Any], test_cluster: Any) -> None:
    workflow = deployed(installed)
    peer3 = next(w for w in workflow["workers"] if w["peer"] == "peer3")
    namespace = test_cluster.host("h4").namespace
    holder = subprocess.Popen(["ip", "netns", "exec", namespace, sys.executable, "-c",
                               "import socket,sys,time; s=socket.socket(); "
                               "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
                               f"s.bind(({peer3['host']!r}, {peer3['port']})); s.listen(); print('bound', flush=True);"
                               " time.sleep(600)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "bound"
        done = pan("deploy", "up", str(installed["inventory"]), check=False, timeout=300)
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 1
    assert f"h4: port(s) in use: {peer3['host']}:{peer3['port']}" in done.stdout
    assert "nothing started" in done.stdout and "Traceback" not in done.stdout + done.stderr
    assert recorded_pids(installed) == []


def test_a_bad_inventory_fails_before_anything_starts_with_one_line_per_problem(
        installed: dict[str, Any], test_cluster: Any, tmp_path: Path) -> None:
    workflow = ROOT / "workflows" / "full_game_3_peers.json"
    unknown = write_inventory(tmp_path / "unknown.json", test_cluster.name, installed["root"] / "hosts", workflow,
                              peers={"peer1": "h2", "peer2": "h9", "peer3": "h4"})
    done = pan("deploy", "up", str(unknown), check=False)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"pan deploy up: {unknown}: peers: peer peer2 is placed on host 'h9': unknown host"]

    wrong_key = tmp_path / "wrong_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong_key)], check=True)
    nobody = cluster.subnet_address(test_cluster.subnet, 250)  # on the cluster's bridge, but no host has it
    hosts = {"h1": {"dir": str(installed["root"] / "hosts" / "h1")},  # installed: only a quick update
             "h2": {"dir": str(tmp_path / "h2"), "ssh": {"key": str(wrong_key)}},
             "h3": {"dir": str(tmp_path / "h3"), "python": "python3.0"},
             "h4": {"dir": str(tmp_path / "h4"), "address": nobody, "ssh": {"timeout_s": 2}}}
    bad = write_inventory(tmp_path / "bad.json", test_cluster.name, tmp_path, workflow)
    data = json.loads(bad.read_text())
    data["hosts"] = hosts
    bad.write_text(json.dumps(data))
    done = pan("deploy", "install", str(bad), check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    lines = sorted(done.stderr.strip().splitlines())
    assert len(lines) == 3, lines
    assert lines[0].startswith("pan deploy install: h2: ") and "refused the key" in lines[0]
    assert lines[1].startswith("pan deploy install: h3: no Python: `python3.0` is missing")
    assert lines[2].startswith("pan deploy install: h4: ") and "unreachable" in lines[2]
    assert not (tmp_path / "h3" / "venv").exists()  # the host without Python got nothing

    done = pan("deploy", "up", str(bad), check=False)
    assert done.returncode == 1 and "nothing started" in done.stdout
    assert len([line for line in done.stdout.splitlines() if line.startswith(("h2:", "h3:", "h4:"))]) == 3
    assert not list(tmp_path.glob("*/run/*.pid")) and recorded_pids(installed) == []


def test_a_tls_workflow_is_deployed_with_its_certificates_and_serves_only_https(
        installed: dict[str, Any], test_cluster: Any, tmp_path: Path) -> None:
    """`pan deploy certs` makes a CA and a certificate per host; install copies them (keys 0600); the peers serve
    HTTPS that status and a subscriber on h5 verify, and plain HTTP gets no answer. Last in the module: it leaves
    the TLS workflow installed."""
    plain = str(installed["inventory"])
    made = pan("deploy", "certs", plain, "--out", str(tmp_path / "certs"))
    tls = json.loads(made.stdout)["tls"]
    workflow = {**json.loads((ROOT / "workflows" / "full_game_3_peers.json").read_text()), "tls": tls}
    (tmp_path / "tls_workflow.json").write_text(json.dumps(workflow))
    inventory = str(write_inventory(tmp_path / "tls.json", test_cluster.name, installed["root"] / "hosts",
                                    tmp_path / "tls_workflow.json"))
    pan("deploy", "install", inventory)
    hosts = installed["root"] / "hosts"
    key = hosts / "h2" / "tls" / f"{test_cluster.host('h2').address}.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert (hosts / "h1" / "tls" / f"{test_cluster.host('h1').address}.pem").is_file()  # the repository's host
    assert (hosts / "h3" / "tls" / "ca.pem").read_bytes() == Path(tls["ca"]).read_bytes()
    pan("deploy", "up", inventory, timeout=300)
    try:
        status = json.loads(pan("deploy", "status", inventory, "--json").stdout)
        assert status["errors"] == [] and all(r["alive"] and r["health"] == "ok" for r in status["rows"]), status
        deployed_tls = deployed(installed)
        forwarder = next(w for w in deployed_tls["workers"] if "SENSOR4" in w["params"].get("inter_pan_inputs", []))
        sent = [sensor_row(4, 10**12 + k * 10**9, k) for k in range(ROWS)]
        with socket.create_connection((forwarder["host"], forwarder["params"]["ingest_port"]), timeout=30) as s:
            s.sendall("".join(line + "\n" for line in sent).encode())
        repository = f"{deployed_tls['repository']['host']}:{deployed_tls['repository']['port']}"
        done = pan("subscribe", "SENSOR4", "--repository", repository, "--ca", tls["ca"], "--count", str(ROWS),
                   namespace=test_cluster.host("h5").namespace, timeout=120)
        assert len([line for line in done.stdout.splitlines() if '"i"' in line]) == ROWS
        with pytest.raises((OSError, http.client.HTTPException)):  # plain HTTP to an HTTPS worker: no answer
            urllib.request.urlopen(f"http://{forwarder['host']}:{forwarder['port']}/health", timeout=10)
    finally:
        down = pan("deploy", "down", inventory, timeout=300)
    assert down.stdout.count("stopped") == 4, down.stdout
