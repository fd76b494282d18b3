"""The processes of `pan bench chaos`: the repository and one `pan peer` process per peer, with their /health.

Each runs in its own process group (``common.Child``), so that any of them can be paused, killed and restarted.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import common
from benchmarks.chaos_workflow import REPEATER_PEERS

HEALTH_BOUND_S = 2.0  # acceptance: every process answers /health this soon after a fault ends
HEALTH_TRY_S = 1.0  # one /health request
HEALTH_GIVE_UP_S = 15.0  # a process not answering by then counts as not answering at all
START_TIMEOUT_S = 60.0  # a (re)started process answers /health within this, or the run fails
GRACE_S = 10.0  # SIGTERM, then SIGKILL


class Proc(common.Child):
    """One PAN process of the cluster, restartable with the same command line; logs to ``log_dir``."""

    def __init__(self, name: str, args: list[str], endpoints: list[tuple[str, int]], log_dir: Path) -> None:
        super().__init__(args, ready=False, grace_s=GRACE_S)
        self.name = name
        self.endpoints = endpoints  # HTTP (host, port) of every server it runs
        self.log_dir = log_dir
        self.starts = 0

    async def start(self) -> Proc:
        """Start (again): every start logs to a file of its own, ``NAME-N.log``."""
        self.starts += 1
        self.log = self.log_dir / f"{self.name}-{self.starts}.log"
        await super().start()
        return self


class Cluster:
    """The repository and every peer of a workflow, each its own process, started and stopped here."""

    def __init__(self, workflow_path: Path, log_dir: Path) -> None:
        from pan.workflow.parser import load_workflow

        self.workflow_path = workflow_path
        self.workflow = load_workflow(workflow_path)
        log_dir.mkdir(parents=True, exist_ok=True)
        repo = self.workflow.repository
        pan = [sys.executable, "-m", "pan"]
        self.procs: dict[str, Proc] = {"repository": Proc(
            "repository", [*pan, "repository", "--host", repo.host, "--port", str(repo.port)],
            [(repo.host, repo.port)], log_dir)}
        for peer, specs in self.workflow.peers().items():
            self.procs[peer] = Proc(peer, [*pan, "peer", str(workflow_path), "--name", peer],
                                    [(s.host, s.port) for s in specs], log_dir)
        self._session: Any = None
        self.crashed: list[str] = []  # processes that ended on their own, not by a fault or by stop()
        self.outside: dict[str, int] = {}  # pids of processes outside the workflow that a stall may pause

    @property
    def peers(self) -> list[str]:
        return [name for name in self.procs if name != "repository"]

    async def start(self) -> None:
        import aiohttp

        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        await self.procs["repository"].start()
        await self.wait_up("repository")
        for peer in self.peers:
            await self.procs[peer].start()
        for peer in self.peers:
            await self.wait_up(peer)

    async def wait_up(self, name: str) -> float:
        """Seconds until every server of ``name`` answers /health; RuntimeError after ``START_TIMEOUT_S``."""
        latency = await self.health_latency(name, time.monotonic(), START_TIMEOUT_S)
        if latency is None:
            raise RuntimeError(f"{name} did not answer /health within {START_TIMEOUT_S:.0f} s "
                               f"(log: {self.procs[name].log_dir / name}-{self.procs[name].starts}.log)")
        return latency

    async def health_latency(self, name: str, since: float, give_up_s: float = HEALTH_GIVE_UP_S) -> float | None:
        """Seconds from ``since`` until every server of ``name`` has answered /health (None: not by give-up)."""
        answers = await asyncio.gather(*(self._first_health(h, p, since, give_up_s)
                                         for h, p in self.procs[name].endpoints))
        return None if any(a is None for a in answers) else max(answers)  # type: ignore[type-var]

    async def health_all(self, since: float) -> dict[str, float | None]:
        names = list(self.procs)
        latencies = await asyncio.gather(*(self.health_latency(n, since) for n in names))
        return {n: None if s is None else round(s, 3) for n, s in zip(names, latencies, strict=True)}

    async def _first_health(self, host: str, port: int, since: float, give_up_s: float) -> float | None:
        import aiohttp

        while time.monotonic() - since < give_up_s:
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                async with self._session.get(f"http://{host}:{port}/health",
                                             timeout=aiohttp.ClientTimeout(total=HEALTH_TRY_S)) as response:
                    await response.read()
                    if response.status == 200:
                        return time.monotonic() - since
            await asyncio.sleep(0.02)
        return None

    async def wait_registered(
        self, streams: list[str], repeated: list[str], timeout_s: float = START_TIMEOUT_S
    ) -> None:
        """Every stream has its producer in the repository, and each repeated one every repeater."""
        from pan.repository.client import RepositoryClient

        repo = self.workflow.repository
        repository = RepositoryClient((repo.host, repo.port), session=self._session, timeout_s=5)
        deadline = time.monotonic() + timeout_s
        await repository.wait_for_publishers(streams, timeout_s, producers=1)
        await repository.wait_for_publishers(repeated, deadline - time.monotonic(), repeaters=len(REPEATER_PEERS))

    async def stop(self) -> dict[str, int | None]:
        """Peers first (they unpublish), then the repository; exit codes by process."""
        self.crashed = [n for n, p in self.procs.items() if p.process is not None and p.process.returncode is not None]
        codes = dict(zip(self.peers, await asyncio.gather(*(self.procs[p].stop() for p in self.peers)), strict=True))
        codes["repository"] = await self.procs["repository"].stop()
        if self._session is not None:
            await self._session.close()
        return codes
