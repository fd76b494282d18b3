"""Checks a command makes before it starts anything, so a mistake is one line instead of a failed peer.

A port that is taken fails a peer only after the repository and the other peers are up; checking every local
listening port of a workflow first names them all at once.
"""

from __future__ import annotations

import contextlib
import errno
import socket
from collections.abc import Callable

from pan.config.specs import RepositorySpec, Workflow, ingest_port


def _taken(host: str, port: int) -> bool:
    """True if ``host:port`` cannot be bound (aiohttp binds with SO_REUSEADDR too, so TIME_WAIT is no problem)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return False  # an unknown host is the workflow's problem, reported by the peer that has it
    family, _, _, _, address = infos[0]
    with contextlib.closing(socket.socket(family, socket.SOCK_STREAM)) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return exc.errno in (errno.EADDRINUSE, errno.EACCES)
    return False


def ports_in_use(workflow: Workflow, is_local: Callable[[str], bool], repositories: list[RepositorySpec],
                 peers: list[str] | None = None) -> list[str]:
    """Every listening port of the workflow on this machine that something else holds, as ``what host:port``.

    ``repositories``: the ones that will be started (one that already answers is used, not started);
    ``peers``: only these peers' workers (default all).
    """
    wanted = [("repository", r.host, r.port) for r in repositories]
    for spec in workflow.workers:
        if peers is not None and spec.peer not in peers:
            continue
        wanted.append((f"worker {spec.name}", spec.host, spec.port))
        if (ingest := ingest_port(spec)) is not None:
            wanted.append((f"ingest of {spec.name}", spec.host, ingest))
    return [f"{what} {host}:{port}" for what, host, port in wanted if is_local(host) and _taken(host, port)]
