"""`pan deploy up|status|logs|down|simulate` on hosts that `pan deploy install` prepared.

Each peer (and the repository) runs detached in a session of its own (``setsid``), its PID in
``DIR/run/NAME.pid`` and its output in ``DIR/logs/NAME.log`` on its host: the PID files are the record that
``status`` and ``down`` read, so any machine with the inventory can run them. Checks of /health and of
the repository's streams run *on* the hosts (a small Python script over SSH), so they need no route from
here to the service ports.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pan.deploy.install import SECRET_NAME, TLS_DIR, WORKFLOW_NAME, remote_venv
from pan.deploy.inventory import HostSpec, Inventory
from pan.deploy.ssh import Connection, HostError, connect, on_hosts, q

REPOSITORY = "repository"
START_TIMEOUT_S = 90.0
STOP_GRACE_S = 15.0

#: Run on a host with its venv's Python: which of the given (address, port) are taken, which answer /health,
#: and which streams the repository lists per publisher. Argument: a JSON object.
PROBE = r"""
import json, socket, ssl, sys, time, urllib.error, urllib.request
job = json.loads(sys.argv[1])
out = {"taken": [], "health": {}, "published": {}, "repository": None}
context = ssl.create_default_context(cafile=job["ca"]) if job.get("ca") else None
scheme = "https" if context else "http"
def get(url, token):
    request = urllib.request.Request(url, headers={"Authorization": "Bearer " + token} if token else {})
    with urllib.request.urlopen(request, timeout=3, context=context) as r:
        return json.loads(r.read())
for address, port in job.get("free", []):
    s = socket.socket()
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((address, port))
    except OSError:
        out["taken"].append([address, port])
    finally:
        s.close()
for address, port in job.get("health", []):
    try:
        out["health"]["%s:%d" % (address, port)] = get("%s://%s:%d/health" % (scheme, address, port), None)["status"]
    except urllib.error.HTTPError as exc:  # a worker with a failed task answers 503 {"status": "failing", ...}
        out["health"]["%s:%d" % (address, port)] = str(json.loads(exc.read()).get("status", exc.code))
    except Exception as exc:
        out["health"]["%s:%d" % (address, port)] = type(exc).__name__
repo = job.get("repository")
if repo:
    token = open(job["token_file"]).read().strip() if job.get("token_file") else None
    try:
        after, count = None, {}
        while True:
            page = get("%s://%s/streams" % (scheme, repo) + ("" if after is None else "?after=" + after), token)
            for name, pubs in page["streams"].items():
                for p in pubs:
                    key = "%s:%d" % (p["host"], p["port"])
                    count[key] = count.get(key, 0) + 1
            after = page.get("next")
            if after is None:
                break
        out["published"], out["repository"] = count, "ok"
    except Exception as exc:
        out["repository"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(out))
"""


@dataclass
class Service:
    """A process that ``up`` starts: a peer, or the repository."""

    name: str
    host: HostSpec
    binds: list[tuple[str, int]]  # what must be free before it starts and answer /health after
    health: list[tuple[str, int]]


def services(inventory: Inventory, workflow: dict[str, Any]) -> list[Service]:
    """The repository first, then every peer, with the addresses and ports each binds on its host."""
    repo_spec = workflow.get("repository", {})
    repo_host = inventory.repository_host
    repo_port = int(repo_spec.get("port", 8080))
    found = [Service(REPOSITORY, repo_host, [(repo_host.address, repo_port)], [(repo_host.address, repo_port)])]
    peers: dict[str, Service] = {}
    for worker in workflow["workers"]:
        peer = worker.get("peer", worker["name"])
        host = inventory.host_of(peer)
        service = peers.setdefault(peer, Service(peer, host, [], []))
        service.binds.append((host.address, int(worker["port"])))
        service.health.append((host.address, int(worker["port"])))
        ingest = worker.get("params", {}).get("ingest_port", worker.get("ingest_port"))
        if isinstance(ingest, int):
            service.binds.append((host.address, ingest))
    return found + list(peers.values())


def hostport(pair: tuple[str, int]) -> str:
    return f"{pair[0]}:{pair[1]}"


def _pid_file(host: HostSpec, name: str) -> str:
    return f"{host.dir}/run/{name}.pid"


def remote_ca(host: HostSpec, workflow: dict[str, Any]) -> str | None:
    """The CA the host's probe trusts (HTTPS) if the workflow has ``tls``, else None (HTTP)."""
    return f"{host.dir}/{TLS_DIR}/ca.pem" if "tls" in workflow else None


async def probe(conn: Connection, job: dict[str, Any]) -> dict[str, Any]:
    python = f"{q(remote_venv(conn.host))}/bin/python"
    done = await conn.run(f"{python} - {q(json.dumps(job))}", input=PROBE, timeout_s=60)
    return json.loads(done.stdout)


async def running(conn: Connection) -> dict[str, int | None]:
    """Name -> PID of every recorded process on the host, None where the process is gone."""
    out = await conn.run(f"cd {q(conn.host.dir)}/run 2>/dev/null && for f in *.pid; do [ -f \"$f\" ] || continue; "
                         "p=$(cat \"$f\"); if kill -0 \"$p\" 2>/dev/null; then echo \"${f%.pid} $p\"; "
                         "else echo \"${f%.pid} -\"; fi; done; true")
    found: dict[str, int | None] = {}
    for line in out.stdout.splitlines():
        name, pid = line.split(" ", 1)
        found[name] = int(pid) if pid.isdigit() else None
    return found


async def preflight(inventory: Inventory, all_services: list[Service]) -> list[str]:
    """Before anything starts: every host reachable, installed, nothing of ours running, every port free."""

    async def check(conn: Connection) -> None:
        host = conn.host
        installed = await conn.run(f"[ -x {q(remote_venv(host))}/bin/pan ] && [ -f {q(host.dir)}/{WORKFLOW_NAME} ]",
                                   check=False)
        if installed.exit_status != 0:
            raise HostError(host.name, f"not installed in {host.dir} (run `pan deploy install` first)")
        alive = {name: pid for name, pid in (await running(conn)).items() if pid is not None}
        if alive:
            raise HostError(host.name, "already running: " + ", ".join(f"{n} (pid {p})" for n, p in alive.items())
                            + " (`pan deploy down` first)")
        binds = [b for s in all_services if s.host is host for b in s.binds]
        taken = (await probe(conn, {"free": binds}))["taken"]
        if taken:
            raise HostError(host.name, "port(s) in use: " + ", ".join(f"{a}:{p}" for a, p in taken))

    _, errors = await on_hosts(inventory.hosts.values(), check)
    return [str(e) for e in errors]


async def start(conn: Connection, service: Service, secret: bool, tls: bool = False) -> int:
    host = conn.host
    venv, folder = q(remote_venv(host)), q(host.dir)
    if service.name == REPOSITORY:
        address, port = service.binds[0]
        args = f"repository --host {q(address)} --port {port}"
        if secret:
            args += f" --secret-file {folder}/{SECRET_NAME}"
        if tls:  # the files `pan deploy install` copied (pan/deploy/install.py)
            args += (f" --tls-cert {folder}/{TLS_DIR}/{q(address)}.pem --tls-key {folder}/{TLS_DIR}/{q(address)}.key"
                     f" --tls-ca {folder}/{TLS_DIR}/ca.pem")
    else:
        args = f"peer {folder}/{WORKFLOW_NAME} --name {q(service.name)}"
    log, pid = f"{folder}/logs/{q(service.name)}.log", q(_pid_file(host, service.name))
    # A simple command in the background (not a list), so that $! is the process itself, which setsid makes
    # the leader of its own session and process group, and no shell between it and us holds the channel open.
    out = await conn.run(f"cd {folder} || exit 1; setsid {venv}/bin/pan {args} > {log} 2>&1 < /dev/null & "
                         f"echo $! > {pid}; cat {pid}")
    return int(out.stdout.strip())


async def wait_healthy(conn: Connection, service: Service, ca: str | None,
                       timeout_s: float = START_TIMEOUT_S) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        if (await running(conn)).get(service.name) is None:
            tail = await conn.run(f"tail -n 3 {q(conn.host.dir)}/logs/{q(service.name)}.log", check=False)
            last = tail.stdout.strip().splitlines()[-1:] or ["no output"]
            raise HostError(conn.host.name, f"{service.name} exited at start-up: {last[0]}")
        health = (await probe(conn, {"health": service.health, "ca": ca}))["health"]
        if all(v == "ok" for v in health.values()):
            return
        if loop.time() > deadline:
            bad = ", ".join(f"{k} {v}" for k, v in health.items() if v != "ok")
            raise HostError(conn.host.name, f"{service.name} not healthy within {timeout_s:g} s: {bad}")
        await asyncio.sleep(0.5)


async def up(inventory: Inventory, workflow: dict[str, Any], report: Any = print) -> int:
    """All or nothing: every service healthy, or whatever started is stopped again. 0 if all runs."""
    all_services = services(inventory, workflow)
    problems = await preflight(inventory, all_services)
    if problems:
        for line in problems:
            report(line)
        report("pan deploy up: nothing started")
        return 1
    secret = "auth" in workflow
    repository, peers = all_services[0], all_services[1:]

    async def start_all(conn: Connection, group: list[Service]) -> list[str]:
        lines = []
        for service in group:
            pid = await start(conn, service, secret, "tls" in workflow)
            lines.append(f"{conn.host.name}: started {service.name} (pid {pid})")
        for service in group:
            await wait_healthy(conn, service, remote_ca(conn.host, workflow))
        return lines

    started, errors = await on_hosts([repository.host], lambda c: start_all(c, [repository]))
    if not errors:
        by_host = {name: [s for s in peers if s.host.name == name] for name in inventory.hosts}
        more, errors = await on_hosts([h for h in inventory.hosts.values() if by_host[h.name]],
                                      lambda c: start_all(c, by_host[c.host.name]))
        started.update({f"{k}/peers": v for k, v in more.items()})
    if errors:
        for error in errors:
            report(str(error))
        report("pan deploy up: a host failed; stopping what was started")
        await down(inventory, report=lambda line: None if ": stopped " in line else report(line))
        return 1
    for lines in started.values():
        for line in lines:
            report(line)
    return 0


async def down(inventory: Inventory, report: Any = print) -> int:
    """Peers first (they unpublish), then the repository; SIGTERM to each process group, SIGKILL after the grace
    period; then check that no recorded process is left. 0 if none is."""

    async def stop(conn: Connection, names: list[str] | None) -> list[str]:
        recorded = await running(conn)
        targets = [n for n in recorded if (n != REPOSITORY) == (names is None) or (names and n in names)]
        pids = [recorded[n] for n in targets if recorded[n] is not None]
        if pids:
            groups = " ".join(f"-{p} {p}" for p in pids)  # the group, and the process should it have left it
            await conn.run(f"kill -TERM -- {groups} 2>/dev/null; for i in $(seq {int(STOP_GRACE_S * 10)}); do "
                           f"kill -0 {' '.join(map(str, pids))} 2>/dev/null || break; sleep 0.1; done; "
                           f"kill -KILL -- {groups} 2>/dev/null; true", timeout_s=STOP_GRACE_S + 30)
        left = [n for n, p in (await running(conn)).items() if n in targets and p is not None]
        if left:
            raise HostError(conn.host.name, f"still running after SIGKILL: {', '.join(left)}")
        if targets:
            await conn.run("rm -f " + " ".join(q(_pid_file(conn.host, n)) for n in targets))
        return [f"{conn.host.name}: stopped {n}" + ("" if recorded[n] else " (was not running)") for n in targets]

    peers_done, errors = await on_hosts(inventory.hosts.values(), lambda c: stop(c, None))
    repo_done, repo_errors = await on_hosts([inventory.repository_host], lambda c: stop(c, [REPOSITORY]))
    for lines in [*peers_done.values(), *repo_done.values()]:
        for line in lines:
            report(line)
    for error in [*errors, *repo_errors]:
        report(str(error))
    return 1 if errors or repo_errors else 0


async def status(inventory: Inventory, workflow: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows of host, process, alive, /health of its workers, streams published; and one line per unreachable host."""
    all_services = services(inventory, workflow)
    repo = all_services[0]
    token_file = f"{inventory.repository_host.dir}/{SECRET_NAME}.token" if "auth" in workflow else None
    published: dict[str, int] = {}
    repo_state = "unreachable"
    try:
        conn = await connect(repo.host)
        try:
            if token_file is not None:
                await conn.run(f"cd {q(repo.host.dir)} && {q(remote_venv(repo.host))}/bin/pan token "
                               f"{WORKFLOW_NAME} > {q(token_file)}.tmp && chmod 600 {q(token_file)}.tmp && "
                               f"mv {q(token_file)}.tmp {q(token_file)}")
            answer = await probe(conn, {"repository": hostport(repo.binds[0]), "token_file": token_file,
                                        "ca": remote_ca(repo.host, workflow)})
            published, repo_state = answer["published"], answer["repository"]
        finally:
            await conn.close()
    except HostError as exc:
        repo_state = exc.message

    async def host_rows(conn: Connection) -> list[dict[str, Any]]:
        recorded = await running(conn)
        mine = [s for s in all_services if s.host is conn.host]
        health = (await probe(conn, {"health": [h for s in mine for h in s.health],
                                     "ca": remote_ca(conn.host, workflow)}))["health"]
        rows = []
        for s in mine:
            checks = [health.get(hostport(hp), "?") for hp in s.health]
            streams = repo_state if s.name == REPOSITORY else sum(published.get(hostport(hp), 0) for hp in s.health)
            rows.append({"host": conn.host.name, "process": s.name, "pid": recorded.get(s.name),
                         "alive": recorded.get(s.name) is not None,
                         "health": "ok" if all(c == "ok" for c in checks) else ",".join(checks),
                         "streams": streams})
        return rows

    results, errors = await on_hosts(inventory.hosts.values(), host_rows)
    down = {e.host for e in errors}
    for name in down:  # a host that does not answer: its processes' state is unknown, shown as such
        results[name] = [{"host": name, "process": s.name, "pid": None, "alive": None, "health": "host down",
                          "streams": None} for s in all_services if s.host.name == name]
    rows = [row for name in inventory.hosts for row in results.get(name, [])]
    return rows, [f"{e.host}: host down: {e.message}" for e in errors]


async def logs(inventory: Inventory, name: str, follow: bool, lines: int = 200) -> int:
    host = inventory.repository_host if name == REPOSITORY else inventory.host_of(name)
    conn = await connect(host)
    try:
        log = f"{q(host.dir)}/logs/{q(name)}.log"
        if not follow:
            done = await conn.run(f"tail -n {lines} {log}", check=False)
            sys.stdout.write(done.stdout)
            if done.exit_status != 0:
                print(f"{host.name}: {done.stderr.strip()}", file=sys.stderr)
            return done.exit_status
        if (await conn.run(f"[ -f {log} ]", check=False)).exit_status != 0:
            print(f"{host.name}: no log {host.dir}/logs/{name}.log (not started yet?)", file=sys.stderr)
            return 1
        # The remote tail ends when we go (our end of the channel closes its stdin), not at its next line.
        process = await conn.conn.create_process(f"tail -n {lines} -f {log} & t=$!; read _; kill $t")
        async for line in process.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
        return 0
    finally:
        await conn.close()


#: The WeakTrueTime master's port on its host, when `simulate` runs on several hosts.
WTT_PORT = 18600
#: How far ahead of now the common start lies: every host must have connected its simulator by then.
START_LEAD_S = 15.0


async def simulate(inventory: Inventory, host_name: str, data: Any, extra: list[str],
                   slaves: Sequence[str] = ()) -> int:
    """Copy a split folder to ``host_name`` (and each of ``slaves``) and run ``pan simulate`` there on the
    deployed workflow. With slaves, each host feeds its share of the input (``--share K/N``), all from one
    start time on the WeakTrueTime clock of ``host_name``, which is their master. The exit code is the worst."""
    names = [host_name, *slaves]
    hosts = [inventory.hosts[name] for name in names]
    if len(hosts) == 1:
        return await _simulate_on(hosts[0], data, extra)
    master = hosts[0]
    start_at_ms = int((time.time() + START_LEAD_S) * 1000)
    common = [*extra, "--start-at", str(start_at_ms)]
    roles = [["--wtt-master", f"{master.address}:{WTT_PORT}"],
             *(["--wtt-slave", f"{master.address}:{WTT_PORT}"] for _ in slaves)]
    codes = await asyncio.gather(*(
        _simulate_on(host, data, [*common, *role, "--share", f"{k}/{len(hosts)}"], prefix=f"{host.name}: ")
        for k, (host, role) in enumerate(zip(hosts, roles, strict=True))))
    return max(codes)


async def _simulate_on(host: HostSpec, data: Any, extra: list[str], prefix: str = "") -> int:
    conn = await connect(host)
    try:
        remote = f"{host.dir}/data/{data.name}"
        await conn.run(f"mkdir -p {q(remote)}")
        await conn.put(sorted(p for p in data.iterdir() if p.is_file()), remote)
        command = (f"cd {q(host.dir)} && {q(remote_venv(host))}/bin/pan simulate --workflow {WORKFLOW_NAME} "
                   f"--data {q(remote)} " + " ".join(q(a) for a in extra))
        process = await conn.conn.create_process(command, stderr=asyncio.subprocess.STDOUT)
        async for line in process.stdout:
            if line:  # whole lines only: several hosts' outputs interleave
                sys.stdout.write(prefix + (line if line.endswith("\n") else line + "\n"))
                sys.stdout.flush()
        await process.wait()
        return int(process.exit_status or 0)
    finally:
        await conn.close()
