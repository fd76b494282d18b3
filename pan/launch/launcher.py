"""`pan run`: one OS process per peer, plus the repository when it is ours.

The launcher owns its child processes: it starts them, reports any that die,
and on SIGTERM or Ctrl-C stops them all (SIGTERM, then SIGKILL after a grace
period) before it returns. Should the launcher itself be killed outright
(SIGKILL), its children notice through their lifeline (pan/launch/lifeline.py) and
stop by themselves, freeing their ports. They stay in the launcher's process
group, so ``kill -- -PGID`` and a terminal's Ctrl-C reach every one of them.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from pan.config.specs import RepositorySpec, Workflow
from pan.launch.lifeline import Lifeline
from pan.security.auth import SecretSource
from pan.security.tls import TlsFiles, scheme

log = logging.getLogger(__name__)

GRACE_S = 10.0
POLL_S = 0.2
#: Time for the repository process to answer. A real error ends it at once (checked at every poll); a slow
#: start does not: at load 10-13 on 2 cores one took more than the 15 s this used to be (a failed replay).
REPOSITORY_STARTUP_S = 120.0


def is_local_host(host: str) -> bool:
    """True if ``host`` names this machine, so its services are ours to start."""
    if host in ("localhost", "0.0.0.0", "::", socket.gethostname()):
        return True
    try:
        if ipaddress.ip_address(host).is_loopback:
            return True
    except ValueError:
        pass
    with contextlib.suppress(OSError):
        return host in socket.gethostbyname_ex(socket.gethostname())[2]
    return False


def is_loopback(host: str) -> bool:
    """True if only this machine can reach ``host`` (``localhost``, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def repository_alive(host: str, port: int, timeout_s: float = 0.5, tls: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(f"{scheme(tls)}://{host}:{port}/health", timeout=timeout_s,
                                    context=tls) as response:
            return response.status == 200
    except OSError:
        return False


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    args: list[str] = field(default_factory=list)  # what ``pan`` was started with, to start it again
    reported: bool = False
    started_at: float = field(default_factory=time.monotonic)
    restarts: int = 0
    restart_at: float | None = None  # when a failed child is due to start again
    repository: RepositorySpec | None = None  # the workflow repository this child serves, if it is one


RESTART_POLICIES = ("no", "on-failure")
RESTART_BACKOFF_S = (0.5, 30.0)  # the first wait before a restart, and the longest
REPLICA_CHECK_S = 5.0  # how long a surviving repository may take to answer (a loaded machine)
STABLE_AFTER_S = 60.0  # a child that ran this long before failing starts again after the first wait


def tls_arguments(tls: TlsFiles | None, host: str) -> list[str]:
    """``pan repository``'s options for HTTPS on ``host`` (and towards its replicas)."""
    if tls is None:
        return []
    cert, key = tls.cert_for(host)
    return [f"--tls-cert={cert}", f"--tls-key={key}", f"--tls-ca={tls.ca}"]


def secret_arguments(auth: SecretSource | None) -> list[str]:
    """``pan repository``'s options that name the workflow's secret (the secret itself never goes on a
    command line, where other users of the machine could read it)."""
    if auth is None:
        return []
    return ["--secret-file", str(auth.file)] if auth.file is not None else ["--secret-env", str(auth.env)]


#: Written into the log folder by a launcher with ``fail_fast`` when a child ends: who, why, and its log.
FAILED_FILE = "failed.json"
LOG_TAIL_LINES = 15


def log_name(child: str) -> str:
    """The log file of a child (``peer p1`` -> ``peer-p1.log``, ``repository 127.0.0.1:8080`` ->
    ``repository-127.0.0.1:8080.log``)."""
    return child.replace(" ", "-") + ".log"


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last ``lines`` non-empty lines of a log (none if it cannot be read)."""
    try:
        with path.open("rb") as log_file:
            log_file.seek(max(0, path.stat().st_size - 16384))
            text = log_file.read().decode(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]


def repositories_to_start(workflow: Workflow) -> list[RepositorySpec]:
    """The workflow's repositories that are on this machine and do not answer yet: the launcher starts them."""
    tls = None if workflow.tls is None else workflow.tls.client_context()
    return [r for r in workflow.repositories if is_local_host(r.host) and not repository_alive(r.host, r.port, tls=tls)]


class Launcher:
    def __init__(self, workflow_path: str | Path, workflow: Workflow, peers: list[str] | None = None,
                 restart: str = "no", log_dir: Path | None = None, fail_fast: bool = False,
                 state_dir: Path | None = None, fresh_start: bool = False) -> None:
        """``restart="on-failure"``: a child that exits with an error (or is killed) starts again after a wait
        that doubles with each failure in a row, up to ``RESTART_BACKOFF_S[1]``. ``log_dir``: each child writes
        its output to ``log_dir/<child>.log`` instead of this process's. ``fail_fast``: the first child that
        ends stops the whole workflow, and the launcher exits 1 (``FAILED_FILE`` in ``log_dir`` says who); a
        repository is no such child while another of the workflow's repositories answers. ``state_dir`` and
        ``fresh_start`` go to every peer (``pan peer --state-dir``): a restarted peer restores its checkpoints."""
        if restart not in RESTART_POLICIES:
            raise ValueError(f"restart policy {restart!r} is not one of {', '.join(RESTART_POLICIES)}")
        self.restart = restart
        self.path = str(workflow_path)
        self.workflow = workflow
        all_peers = list(workflow.peers())
        unknown = sorted(set(peers or []) - set(all_peers))
        if unknown:
            raise ValueError(f"unknown peer(s) {', '.join(unknown)}; the workflow has: {', '.join(all_peers)}")
        self.peers = peers or all_peers
        self.log_dir = log_dir
        self.fail_fast = fail_fast
        self.state_arguments = ([] if state_dir is None else ["--state-dir", str(state_dir)]) + (
            ["--fresh-start"] if fresh_start else [])
        self.failed: Child | None = None  # with fail_fast: the child whose end stopped the workflow
        self.children: list[Child] = []
        self._stopping = False
        self._lifeline: Lifeline | None = None

    def start(self) -> None:
        repositories = self.workflow.repositories
        tls = None if self.workflow.tls is None else self.workflow.tls.client_context()
        for repo in repositories_to_start(self.workflow):
            replicas = [f"--replica={r.address}" for r in repositories if r is not repo]
            allowed = [f"--allow-host={h}" for h in sorted(self.workflow.allowed_hosts or ())]
            # One log per repository: replicas on this machine must not write into one file.
            name = "repository" if len(repositories) == 1 else f"repository {repo.address}"
            self._spawn(name, ["repository", "--host", repo.host, "--port", str(repo.port), *replicas,
                               *allowed, *secret_arguments(self.workflow.auth),
                               *tls_arguments(self.workflow.tls, repo.host)], repository=repo)
            self._wait_for_repository(repo, tls)
        for peer in self.peers:
            self._spawn(f"peer {peer}", ["peer", self.path, "--name", peer, *self.state_arguments])

    def _spawn(self, name: str, args: list[str], repository: RepositorySpec | None = None) -> None:
        """Start ``pan ARGS`` tied to this process (spawned from the main thread: see pan/launch/lifeline.py)."""
        self.children.append(Child(name, self._popen(name, args), list(args), repository=repository))
        log.info("started %s (pid %d)", name, self.children[-1].process.pid)

    def _popen(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        if self._lifeline is None:
            self._lifeline = Lifeline()
        if self.log_dir is None:
            return subprocess.Popen([sys.executable, "-m", "pan", *args], **self._lifeline.spawn_options())
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with (self.log_dir / log_name(name)).open("ab") as out:  # the child keeps its own copy of the descriptor
            return subprocess.Popen([sys.executable, "-m", "pan", *args], stdout=out, stderr=subprocess.STDOUT,
                                    **self._lifeline.spawn_options())

    def _wait_for_repository(self, repo: RepositorySpec, tls: ssl.SSLContext | None) -> None:
        deadline = time.monotonic() + REPOSITORY_STARTUP_S
        while time.monotonic() < deadline:
            if repository_alive(repo.host, repo.port, tls=tls):
                return
            if self.children[-1].process.poll() is not None:
                raise RuntimeError(f"repository on {repo.address} exited at start-up")
            time.sleep(0.05)
        raise RuntimeError(f"repository on {repo.address} did not answer within {REPOSITORY_STARTUP_S} s")

    def run(self) -> int:
        """Block until a signal arrives or every child has ended."""
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.start()
            while not self._stopping and any(c.process.poll() is None or c.restart_at is not None
                                             for c in self.children):
                self._report_exits()
                self._restart_due()
                time.sleep(POLL_S)
            self._report_exits()
        finally:
            self.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if self.failed is not None:
            return 1
        failed = [c for c in self.children if c.process.returncode not in (0, -signal.SIGTERM)]
        return 1 if failed and not self._stopping else 0

    def _on_signal(self, signum: int, frame: object) -> None:
        log.info("received %s; shutting down", signal.Signals(signum).name)
        self._stopping = True

    def _report_exits(self) -> None:
        for child in self.children:
            code = child.process.poll()
            if code is not None and not child.reported:
                child.reported = True
                if self._stopping:
                    continue
                why = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
                if self.fail_fast and not self._replicas_answer(child):
                    self._fail(child, why)
                    return
                if self.restart == "on-failure" and code != 0:
                    wait = self._backoff(child)
                    child.restart_at = time.monotonic() + wait
                    log.warning("%s %s; starting it again in %.1f s (restart %d)", child.name, why, wait,
                                child.restarts + 1)
                else:
                    log.warning("%s %s", child.name, why)

    def _replicas_answer(self, child: Child) -> bool:
        """``child`` is one of the workflow's repositories and another one still answers: publishers and
        subscribers use that one, so the workflow goes on (replicas are there to outlive one repository)."""
        if child.repository is None:
            return False
        ended = child.repository.address
        tls = None if self.workflow.tls is None else self.workflow.tls.client_context()
        alive = [r for r in self.workflow.repositories
                 if r.address != ended and repository_alive(r.host, r.port, timeout_s=REPLICA_CHECK_S, tls=tls)]
        if alive:
            log.warning("repository on %s ended; the workflow goes on with %s", ended,
                        ", ".join(r.address for r in alive))
        return bool(alive)

    def _fail(self, child: Child, why: str) -> None:
        """Stop the workflow because ``child`` ended, saying so (with the end of its log) and in ``FAILED_FILE``."""
        self.failed, self._stopping = child, True
        tail: list[str] = []
        if self.log_dir is not None:
            path = self.log_dir / log_name(child.name)
            tail = log_tail(path)
            record = {"child": child.name, "why": why, "log": str(path), "tail": tail}
            (self.log_dir / FAILED_FILE).write_text(json.dumps(record, indent=1))
        log.error("%s %s; stopping the workflow%s", child.name, why,
                  "".join(f"\n  | {line}" for line in tail))

    @staticmethod
    def _backoff(child: Child) -> float:
        """Double the wait with each failure in a row; a child that had run for a while starts from the first."""
        if time.monotonic() - child.started_at >= STABLE_AFTER_S:
            child.restarts = 0
        first, longest = RESTART_BACKOFF_S
        return min(longest, first * 2 ** child.restarts)

    def _restart_due(self) -> None:
        assert self._lifeline is not None
        now = time.monotonic()
        for child in self.children:
            if child.restart_at is not None and now >= child.restart_at:
                child.process = self._popen(child.name, child.args)
                child.restart_at, child.reported, child.started_at = None, False, now
                child.restarts += 1
                log.info("started %s again (pid %d)", child.name, child.process.pid)

    def stop(self) -> None:
        """Peers first (they unpublish), then the repository."""
        for group in (
            [c for c in self.children if c.repository is None],
            [c for c in self.children if c.repository is not None],
        ):
            for child in group:
                if child.process.poll() is None:
                    child.process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + GRACE_S
            for child in group:
                try:
                    child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    log.warning("%s did not stop in %.0f s; killing it", child.name, GRACE_S)
                    child.process.kill()
                    child.process.wait()
        if self._lifeline is not None:
            self._lifeline.close()
            self._lifeline = None
