"""An inventory: the hosts of a deployment, how to reach each over SSH, and which peers each one runs.

A JSON file::

    {"workflow": "full_game_3_peers.json",   # the workflow it deploys (or `--workflow`)
     "cluster": "pan",                      # optional: addresses and key from `pan cluster up --name pan`
     "ssh": {"user": "root", "port": 22, "key": "id_ed25519", "known_hosts": "known_hosts"},  # defaults
     "hosts": {"h1": {"address": "198.18.0.2", "dir": "/srv/pan", "python": "python3", "java": false}, ...},
     "repository": "h1",                    # the host that runs the workflow's repository
     "peers": {"peer1": "h2", ...},         # peers not named here: the host whose address is their workers' host
     "files": ["profile.json"]}             # data files the workflow needs, copied next to it

Relative paths are taken from the inventory's folder. The deployed workflow binds and publishes every worker on
its host's address, and names the repository host's address, so one workflow file serves a single machine and
a cluster alike.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pan.config.specs import WorkflowError
from pan.deploy import cluster
from pan.workflow.parser import load_workflow

HOST_KEYS = {"address", "dir", "python", "java", "ssh"}
SSH_KEYS = {"user", "port", "key", "known_hosts", "timeout_s"}
TOP_KEYS = {"workflow", "cluster", "ssh", "hosts", "repository", "peers", "files", "description"}


class InventoryError(Exception):
    """Every problem of an inventory, one line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class SshTarget:
    user: str
    address: str
    port: int
    key: Path | None
    known_hosts: Path | None  # None: the user's own (~/.ssh/known_hosts)
    timeout_s: float = 10.0


@dataclass
class HostSpec:
    name: str
    ssh: SshTarget
    dir: str  # the remote working folder
    python: str = "python3"
    java: bool = False  # Spark jobs run here: check Java 17+
    peers: list[str] = field(default_factory=list)
    repository: bool = False

    @property
    def address(self) -> str:
        return self.ssh.address


@dataclass
class Inventory:
    source: Path
    hosts: dict[str, HostSpec]
    files: list[Path]
    workflow_path: Path
    workflow: dict[str, Any]  # the workflow's JSON, as written (validated by pan.workflow.parser)

    def host_of(self, peer: str) -> HostSpec:
        for host in self.hosts.values():
            if peer in host.peers:
                return host
        raise KeyError(peer)

    @property
    def repository_host(self) -> HostSpec:
        return next(h for h in self.hosts.values() if h.repository)

    def deployed_workflow(self, data: dict[str, Any]) -> dict[str, Any]:
        """The workflow as the hosts run it: each worker on its host's address, the repository on its host's."""
        repo = self.repository_host
        workers = [{**w, "host": self.host_of(w.get("peer", w["name"])).address} for w in data["workers"]]
        return {**data, "repository": {**data.get("repository", {}), "host": repo.address}, "workers": workers}


def load_inventory(path: str | Path, workflow: str | Path | None = None) -> Inventory:
    """Parse ``path`` and its workflow (``workflow`` or the inventory's own); ``InventoryError`` lists every
    problem found."""
    path = Path(path)
    raw = _json_object(path)
    if workflow is None:
        if not isinstance(raw.get("workflow"), str):
            raise InventoryError([f"{path}: workflow: name the workflow file (or give --workflow)"])
        workflow = path.resolve().parent / raw["workflow"]
    workflow = Path(workflow)
    try:
        load_workflow(workflow)
    except WorkflowError as exc:
        raise InventoryError([f"{exc.source}: {p}" for p in exc.problems]) from None
    return _Parser(path, raw).parse(workflow, _json_object(workflow))


def _json_object(path: Path) -> dict[str, Any]:
    try:
        raw = json.loads(path.read_text())
    except OSError as exc:
        raise InventoryError([f"{path}: {exc.strerror or exc}"]) from None
    except ValueError as exc:
        raise InventoryError([f"{path}: not JSON: {exc}"]) from None
    if not isinstance(raw, dict):
        raise InventoryError([f"{path}: must be a JSON object"])
    return raw


class _Parser:
    def __init__(self, path: Path, raw: dict[str, Any]) -> None:
        self.path = path
        self.raw = raw
        self.base = path.resolve().parent
        self.problems: list[str] = []

    def bad(self, where: str, message: str) -> None:
        self.problems.append(f"{self.path}: {where}: {message}")

    def file(self, value: object, where: str) -> Path | None:
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            self.bad(where, "must be a path")
            return None
        return self.base / Path(value).expanduser()

    def parse(self, workflow_path: Path, workflow: dict[str, Any]) -> Inventory:
        raw = self.raw
        for key in sorted(set(raw) - TOP_KEYS):
            self.bad(key, f"unknown key (known: {', '.join(sorted(TOP_KEYS))})")
        state = self.cluster_state(raw.get("cluster"))
        defaults = dict(cluster.inventory_hosts(state, "")["ssh"]) if state else {}  # type: ignore[call-overload]
        if isinstance(raw.get("ssh"), dict):
            defaults.update(raw["ssh"])
        elif "ssh" in raw:
            self.bad("ssh", "must be an object")
        hosts_raw = raw.get("hosts")
        if not isinstance(hosts_raw, dict) or not hosts_raw:
            self.bad("hosts", "must be an object naming at least one host")
            hosts_raw = {}
        hosts = {name: self.host(name, spec, defaults, state) for name, spec in hosts_raw.items()}
        hosts = {name: h for name, h in hosts.items() if h is not None}
        self.place(workflow, hosts)
        files = [f for i, v in enumerate(raw.get("files", [])) if (f := self.file(v, f"files[{i}]")) is not None]
        for f in files:
            if not f.is_file():
                self.bad("files", f"{f} does not exist")
        if self.problems:
            raise InventoryError(self.problems)
        return Inventory(self.path, hosts, files, workflow_path, workflow)

    def cluster_state(self, name: object) -> cluster.ClusterState | None:
        if name is None:
            return None
        if not isinstance(name, str):
            self.bad("cluster", "must be a cluster's name")
            return None
        try:
            state = cluster.load_state(name)
        except cluster.ClusterError as exc:
            self.bad("cluster", str(exc))
            return None
        if state is None:
            self.bad("cluster", f"no cluster {name} on this machine (`pan cluster up --name {name}` makes one)")
        return state

    def host(self, name: str, spec: object, defaults: dict[str, Any],
             state: cluster.ClusterState | None) -> HostSpec | None:
        where = f"hosts.{name}"
        if not isinstance(spec, dict):
            self.bad(where, "must be an object")
            return None
        for key in sorted(set(spec) - HOST_KEYS):
            self.bad(where, f"unknown key {key!r} (known: {', '.join(sorted(HOST_KEYS))})")
        ssh = {**defaults, **(spec.get("ssh") or {})}
        for key in sorted(set(ssh) - SSH_KEYS):
            self.bad(f"{where}.ssh", f"unknown key {key!r} (known: {', '.join(sorted(SSH_KEYS))})")
        address = spec.get("address")
        if address is None and state is not None:
            try:
                address = state.host(name).address
            except cluster.ClusterError as exc:
                self.bad(where, str(exc))
                return None
        if not isinstance(address, str) or not address:
            self.bad(where, "needs an 'address'")
            return None
        folder = spec.get("dir")
        if not isinstance(folder, str) or not folder.startswith("/"):
            self.bad(where, "needs a 'dir': an absolute remote folder")
            return None
        port = ssh.get("port", 22)
        if not isinstance(port, int) or not 0 < port < 65536:
            self.bad(f"{where}.ssh", "port must be 1 to 65535")
            return None
        target = SshTarget(user=str(ssh.get("user", "root")), address=address, port=port,
                           key=self.file(ssh.get("key"), f"{where}.ssh.key"),
                           known_hosts=self.file(ssh.get("known_hosts"), f"{where}.ssh.known_hosts"),
                           timeout_s=float(ssh.get("timeout_s", 10.0)))
        return HostSpec(name, target, folder.rstrip("/") or "/", python=str(spec.get("python", "python3")),
                        java=bool(spec.get("java", False)))

    def place(self, workflow: dict[str, Any], hosts: dict[str, HostSpec]) -> None:
        """Every peer (and the repository) onto exactly one known host."""
        by_address = {h.address: h for h in hosts.values()}
        wanted = self.raw.get("peers", {})
        if not isinstance(wanted, dict):
            self.bad("peers", "must map peer names to host names")
            wanted = {}
        peers: dict[str, str] = {}
        for worker in workflow.get("workers", []):
            peers.setdefault(worker.get("peer", worker["name"]), worker.get("host", ""))
        for peer in sorted(set(wanted) - set(peers)):
            self.bad("peers", f"the workflow has no peer {peer!r}")
        for peer, worker_host in peers.items():
            name = wanted.get(peer)
            host = hosts.get(name) if isinstance(name, str) else by_address.get(worker_host)
            if host is None:
                named = f"host {name!r}" if name is not None else f"no host (and no host has address {worker_host})"
                self.bad("peers", f"peer {peer} is placed on {named}: unknown host")
                continue
            host.peers.append(peer)
        repo = self.raw.get("repository")
        if repo not in hosts:
            self.bad("repository", f"must name one of the hosts ({', '.join(hosts) or 'none'}), got {repo!r}")
        else:
            hosts[repo].repository = True
