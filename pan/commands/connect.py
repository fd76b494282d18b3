"""How a client command finds and reaches a running workflow: its repositories, read token and CA.

``--workflow FILE`` takes all three from the workflow (its repositories, its
secret's read token, its ``tls.ca``); ``--repository``, ``--token-file`` (or
``$PAN_TOKEN``) and ``--ca`` give them one by one, and win over the workflow.
Before a command pulls anything, ``check_reachable`` asks the repositories
once, so that a wrong address is one line and an exit rather than a silent
wait.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from pan.config.specs import WorkflowError
from pan.repository.client import NotTrusted, Publisher, RepositoryClient, RepositoryUnavailable, parse_addresses
from pan.repository.server import DEFAULT_PORT
from pan.security.auth import AuthError
from pan.security.tls import TlsError, client_context
from pan.workflow.parser import load_workflow

TOKEN_ENV = "PAN_TOKEN"
DEFAULT_REPOSITORY = f"127.0.0.1:{DEFAULT_PORT}"
CONNECT_TIMEOUT_S = 10.0


class ConnectError(Exception):
    """A one-line reason the command cannot reach the workflow."""


@dataclass(frozen=True)
class Connection:
    repositories: list[tuple[str, int]]
    token: str | None = None
    tls: ssl.SSLContext | None = None

    @property
    def shown(self) -> str:
        return ",".join(f"{host}:{port}" for host, port in self.repositories)


def add_connection_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workflow", metavar="FILE",
                   help="find the repositories, read token and CA in this workflow file")
    p.add_argument("--repository", metavar="HOST:PORT[,HOST:PORT...]",
                   help=f"the workflow's repository, or all of them (default: the workflow's, else "
                        f"{DEFAULT_REPOSITORY})")
    p.add_argument("--token-file", metavar="PATH",
                   help=f"the read token of a workflow with a secret (`pan token`; default: ${TOKEN_ENV}, "
                        "or the workflow's)")
    p.add_argument("--ca", metavar="PEM", help="HTTPS: trust this CA (default: the workflow's tls.ca)")
    p.add_argument("--connect-timeout", type=float, default=CONNECT_TIMEOUT_S, metavar="S",
                   help="give up when no repository answers within this many seconds (default: %(default)s)")


def connection(args: argparse.Namespace) -> Connection:
    """The connection the options describe; ``ConnectError`` names the option that is wrong."""
    repositories: list[tuple[str, int]] = []
    token: str | None = None
    tls: ssl.SSLContext | None = None
    if args.workflow is not None:
        try:
            workflow = load_workflow(args.workflow)
            repositories = workflow.repository_addresses
            token = None if workflow.auth is None else workflow.auth.load().read_token
            tls = None if workflow.tls is None else workflow.tls.client_context()
        except WorkflowError as exc:
            raise ConnectError(f"--workflow: {exc}") from None
        except (AuthError, TlsError) as exc:
            raise ConnectError(f"--workflow: {exc}") from None
    try:
        if args.repository is not None or not repositories:
            repositories = parse_addresses(args.repository or DEFAULT_REPOSITORY)
    except ValueError as exc:
        raise ConnectError(f"--repository: {exc}") from None
    try:
        if args.token_file is not None:
            token = Path(args.token_file).read_text().strip() or None
        elif os.environ.get(TOKEN_ENV, "").strip():
            token = os.environ[TOKEN_ENV].strip()
    except OSError as exc:
        raise ConnectError(f"--token-file: {exc.strerror or exc}") from None
    try:
        if args.ca is not None:
            tls = client_context(Path(args.ca))
    except TlsError as exc:
        raise ConnectError(f"--ca: {exc}") from None
    if args.connect_timeout <= 0:
        raise ConnectError("--connect-timeout must be > 0")
    return Connection(repositories, token, tls)


async def registered_streams(conn: Connection, timeout_s: float) -> dict[str, list[Publisher]]:
    """Every stream the first answering repository lists; ``ConnectError`` if none answers in time."""
    problems = []
    deadline = asyncio.get_running_loop().time() + timeout_s
    for address in conn.repositories:
        left = max(0.5, deadline - asyncio.get_running_loop().time())
        async with RepositoryClient(address, token=conn.token, tls=conn.tls, timeout_s=left) as repository:
            try:
                return await repository.streams()
            except (RepositoryUnavailable, NotTrusted) as exc:
                problems.append(str(exc))
    raise ConnectError("no repository answered: " + "; ".join(problems)
                       + " (is the workflow running? --workflow FILE finds its repositories)")


def missing_stream(stream: str, streams: dict[str, list[Publisher]]) -> str:
    """The line that says a stream has no publisher, and which ones do."""
    if not streams:
        return f"no publisher of {stream}: the repository lists no stream yet"
    names = sorted(streams)
    near = [name for name in names if stream.lower() in name.lower()] or names
    shown = ", ".join(near[:12]) + (f" and {len(near) - 12} more" if len(near) > 12 else "")
    return f"no publisher of {stream}; the repository lists {len(names)} streams, e.g. {shown} (pan streams lists all)"
