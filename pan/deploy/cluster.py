"""A test cluster on one machine: network namespaces as hosts on a bridge, each with its own sshd.

``up`` makes, for hosts h1..hN of cluster NAME:

- a bridge in the root namespace with 198.18.S.1/24 (S: the cluster's subnet, in the benchmarking range
  198.18.0.0/15 and nowhere else), so this machine reaches every host;
- per host, a namespace with a veth on the bridge, address 198.18.S.(K+1), and optional ``tbf`` bandwidth
  and ``netem`` delay on both ends of its link;
- per host, Debian's ``sshd`` listening on that address only, with a generated host key, accepting one
  generated client key (``client_key`` in the state folder) and nothing else.

Every resource is written to the state file *before* it is made, so ``down`` removes all of it (namespaces
with whatever still runs in them, veths, the bridge, the sshds) also after a crash halfway through ``up``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pan.deploy import netns
from pan.deploy.netns import NetnsError, sh

NETWORK = ipaddress.ip_network("198.18.0.0/15")  # RFC 2544's benchmarking range: the only one a cluster uses
STATE_ROOT = Path(os.environ.get("PAN_CLUSTER_DIR", "/run/pan-cluster"))
SSHD = Path("/usr/sbin/sshd")
SFTP_SERVER = Path("/usr/lib/openssh/sftp-server")
SSH_PORT = 22
SSHD_START_S = 20.0
MAX_HOSTS = 200


class ClusterError(RuntimeError):
    """Something the user must fix or know; one line."""


@dataclass
class Host:
    name: str
    namespace: str
    address: str
    veth: str  # the root namespace's end; the host's end is eth0 in its namespace
    sshd_pid: int | None = None


@dataclass
class ClusterState:
    """What a cluster made, as written to ``STATE_ROOT/NAME/state.json``."""

    name: str
    subnet: int
    bridge: str
    hosts: list[Host] = field(default_factory=list)
    bandwidth_mbit: float = 0.0
    delay_ms: float = 0.0

    @property
    def folder(self) -> Path:
        return state_folder(self.name)

    @property
    def client_key(self) -> Path:
        return self.folder / "client_key"

    @property
    def known_hosts(self) -> Path:
        return self.folder / "known_hosts"

    def save(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / "state.json.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=1))
        tmp.replace(self.folder / "state.json")

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise ClusterError(f"cluster {self.name} has no host {name!r}; it has {', '.join(h.name for h in self.hosts)}")


def state_folder(name: str) -> Path:
    return STATE_ROOT / name


def load_state(name: str) -> ClusterState | None:
    path = state_folder(name) / "state.json"
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ClusterError(f"cannot read {path}: {exc}") from None
    raw["hosts"] = [Host(**h) for h in raw.get("hosts", [])]
    return ClusterState(**raw)


def check_name(name: str) -> None:
    if not name or len(name) > 8 or not name.isalnum():
        raise ClusterError(f"cluster name {name!r}: use 1 to 8 letters or digits")


def subnet_address(subnet: int, index: int) -> str:
    """Address ``index`` (1: the bridge, 2..: the hosts) of subnet ``subnet`` (0..511) of 198.18.0.0/15."""
    return str(NETWORK.network_address + subnet * 256 + index)


def used_subnets() -> set[int]:
    """Subnets of 198.18.0.0/15 that an interface of the root namespace has an address in, or a cluster claims."""
    used = set()
    for line in sh("ip", "-4", "-o", "addr", "show", check=False).stdout.splitlines():
        for word in line.split():
            with contextlib.suppress(ValueError):
                address = ipaddress.ip_interface(word).ip
                if address in NETWORK:
                    used.add((int(address) - int(NETWORK.network_address)) // 256)
    if STATE_ROOT.is_dir():
        for folder in STATE_ROOT.iterdir():
            with contextlib.suppress(ClusterError):
                state = load_state(folder.name)
                if state is not None:
                    used.add(state.subnet)
    return used


def free_subnet() -> int:
    used = used_subnets()
    for subnet in range(NETWORK.num_addresses // 256):
        if subnet not in used:
            return subnet
    raise ClusterError("every /24 of 198.18.0.0/15 is in use")


def problem() -> str | None:
    """None if a cluster can be made here, else why not (one line)."""
    reason = netns.can_create_namespaces()
    if reason:
        return reason
    if not SSHD.exists():
        return f"{SSHD} is missing: install Debian's openssh-server (`make sshd` as root does)"
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen is missing: install Debian's openssh-client"
    return None


def keygen(path: Path, comment: str) -> None:
    if not path.exists():
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path))


def sshd_config(state: ClusterState, host: Host) -> Path:
    folder = state.folder
    config = folder / f"sshd_{host.name}.conf"
    config.write_text("\n".join([
        f"ListenAddress {host.address}:{SSH_PORT}",
        f"HostKey {folder / f'host_key_{host.name}'}",
        f"AuthorizedKeysFile {folder / 'authorized_keys'}",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password",
        "UsePAM no",
        "StrictModes no",
        f"PidFile {folder / f'sshd_{host.name}.pid'}",
        "LogLevel ERROR",
        "MaxStartups 100",
        f"Subsystem sftp {SFTP_SERVER}",  # pan deploy copies files over SFTP
        "",
    ]))
    return config


def wait_for_port(address: str, port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((address, port), timeout=1.0):
            return True
        time.sleep(0.1)
    return False


def up(name: str, hosts: int, *, subnet: int | None = None, bandwidth_mbit: float = 0.0,
       delay_ms: float = 0.0) -> ClusterState:
    """Make cluster ``name`` with ``hosts`` hosts; on any failure, remove what was made and raise ``ClusterError``."""
    check_name(name)
    if not 1 <= hosts <= MAX_HOSTS:
        raise ClusterError(f"--hosts must be 1 to {MAX_HOSTS}")
    reason = problem()
    if reason:
        raise ClusterError(reason)
    if load_state(name) is not None:
        raise ClusterError(f"cluster {name} exists already (`pan cluster down --name {name}` removes it)")
    subnet = free_subnet() if subnet is None else subnet
    if not 0 <= subnet < NETWORK.num_addresses // 256:
        raise ClusterError("--subnet must be 0 to 511 (a /24 of 198.18.0.0/15)")
    state = ClusterState(name, subnet, f"pcb{name}"[:15], bandwidth_mbit=bandwidth_mbit, delay_ms=delay_ms)
    state.save()
    try:
        _make(state, hosts)
    except (NetnsError, ClusterError, OSError, subprocess.SubprocessError) as exc:
        down(name)
        raise ClusterError(str(exc)) from None
    return state


def _make(state: ClusterState, hosts: int) -> None:
    folder = state.folder
    folder.chmod(0o700)
    keygen(state.client_key, f"pan-cluster-{state.name}")
    (folder / "authorized_keys").write_text((folder / "client_key.pub").read_text())
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation folder
    sh("ip", "link", "add", state.bridge, "type", "bridge")
    sh("ip", "addr", "add", f"{subnet_address(state.subnet, 1)}/24", "dev", state.bridge)
    sh("ip", "link", "set", state.bridge, "up")
    known = []
    for k in range(1, hosts + 1):
        host = Host(f"h{k}", f"pan-{state.name}-h{k}", subnet_address(state.subnet, k + 1), f"pcv{state.name}{k}"[:15])
        state.hosts.append(host)
        state.save()
        sh("ip", "netns", "add", host.namespace)
        sh("ip", "-n", host.namespace, "link", "set", "lo", "up")
        sh("ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.namespace)
        sh("ip", "link", "set", host.veth, "master", state.bridge, "up")
        sh("ip", "-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
        sh("ip", "-n", host.namespace, "link", "set", "eth0", "up")
        if state.bandwidth_mbit or state.delay_ms:
            netns.shape(None, host.veth, bandwidth_mbit=state.bandwidth_mbit, delay_ms=state.delay_ms)
            netns.shape(host.namespace, "eth0", bandwidth_mbit=state.bandwidth_mbit, delay_ms=state.delay_ms)
        keygen(folder / f"host_key_{host.name}", f"pan-cluster-{state.name}-{host.name}")
        config = sshd_config(state, host)
        log = (folder / f"sshd_{host.name}.log").open("ab")
        with log:
            process = subprocess.Popen(netns.exec_args(host.namespace, str(SSHD), "-D", "-f", str(config),
                                                       "-E", str(folder / f"sshd_{host.name}.log")),
                                       stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        host.sshd_pid = process.pid
        state.save()
        public = (folder / f"host_key_{host.name}.pub").read_text().split()
        known.append(f"{host.address} {public[0]} {public[1]}")
    state.known_hosts.write_text("\n".join(known) + "\n")
    for host in state.hosts:
        if not wait_for_port(host.address, SSH_PORT, SSHD_START_S):
            tail = (folder / f"sshd_{host.name}.log").read_text(errors="replace").strip().splitlines()[-1:]
            raise ClusterError(f"sshd of {host.name} did not listen on {host.address}:{SSH_PORT} within "
                               f"{SSHD_START_S:.0f} s{': ' + tail[0] if tail else ''}")


def _stop_processes(pids: list[int], grace_s: float = 5.0) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if _alive(pid)]
        time.sleep(0.05)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):  # a zombie of ours counts as gone
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            return False
    return True


def down(name: str) -> list[str]:
    """Remove everything cluster ``name`` made (also after a crash); what was removed, as lines."""
    state = load_state(name)
    if state is None:
        return []
    removed = []
    existing = netns.namespaces()
    for host in state.hosts:
        pids = netns.pids_in(host.namespace) if host.namespace in existing else []
        if host.sshd_pid is not None and host.sshd_pid not in pids and _alive(host.sshd_pid):
            pids.append(host.sshd_pid)  # `ip netns exec` itself, if sshd had not started yet
        _stop_processes(pids)
        if pids:
            removed.append(f"{host.name}: stopped {len(pids)} process(es)")
        if host.namespace in existing:
            sh("ip", "netns", "del", host.namespace, check=False)
            removed.append(f"{host.name}: namespace {host.namespace}")
        if sh("ip", "link", "del", host.veth, check=False).returncode == 0:
            removed.append(f"{host.name}: veth {host.veth}")
    if sh("ip", "link", "del", state.bridge, check=False).returncode == 0:
        removed.append(f"bridge {state.bridge}")
    shutil.rmtree(state.folder, ignore_errors=True)
    return removed


def status(name: str) -> list[dict[str, object]]:
    """Per host: its address, whether its namespace exists, whether its sshd runs and answers."""
    state = load_state(name)
    if state is None:
        raise ClusterError(f"no cluster {name} (`pan cluster up --name {name}` makes one)")
    existing = netns.namespaces()
    rows = []
    for host in state.hosts:
        alive = host.sshd_pid is not None and _alive(host.sshd_pid)
        answers = host.namespace in existing and wait_for_port(host.address, SSH_PORT, 0.5)
        rows.append({"host": host.name, "address": host.address, "namespace": host.namespace in existing,
                     "sshd": alive, "ssh_answers": answers, "processes": len(netns.pids_in(host.namespace))
                     if host.namespace in existing else 0})
    return rows


def inventory_hosts(state: ClusterState, remote_root: str) -> dict[str, object]:
    """The ``ssh`` defaults and ``hosts`` of a deploy inventory for this cluster (each host its own folder)."""
    return {
        "ssh": {"user": "root", "port": SSH_PORT, "key": str(state.client_key), "known_hosts": str(state.known_hosts)},
        "hosts": {h.name: {"address": h.address, "dir": f"{remote_root}/{h.name}"} for h in state.hosts},
    }
