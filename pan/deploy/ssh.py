"""One SSH connection per host (asyncssh): every way of failing to reach a host becomes one line."""

from __future__ import annotations

import asyncio
import shlex
import warnings
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pan.deploy.inventory import HostSpec

with warnings.catch_warnings():
    # cryptography 51 deprecates DSA, which asyncssh still imports: a warning on every `pan deploy` start would break
    # its promise of one line per problem. PAN never uses DSA keys.
    warnings.filterwarnings("ignore", message="DSA is deprecated")
    import asyncssh

T = TypeVar("T")
asyncssh.set_log_level("WARNING")  # its INFO lines (every channel opened) would drown the one line per host
COMMAND_TIMEOUT_S = 120.0


class HostError(Exception):
    """What went wrong on one host, as one line that starts with the host's name."""

    def __init__(self, host: str, message: str) -> None:
        super().__init__(f"{host}: {message}")
        self.host = host
        self.message = message


@dataclass
class Result:
    exit_status: int
    stdout: str
    stderr: str


def _why(exc: BaseException, host: HostSpec) -> str:
    target = f"{host.ssh.user}@{host.address}:{host.ssh.port}"
    if isinstance(exc, asyncssh.PermissionDenied):
        return f"{target} refused the key {host.ssh.key} (permission denied)"
    if isinstance(exc, asyncssh.HostKeyNotVerifiable):
        return f"{target}: host key not verifiable against {host.ssh.known_hosts or '~/.ssh/known_hosts'}"
    if isinstance(exc, asyncssh.KeyImportError | FileNotFoundError):
        return f"cannot load the SSH key {host.ssh.key}: {exc}"
    if isinstance(exc, TimeoutError):
        return f"{target} unreachable (no answer within {host.ssh.timeout_s:g} s)"
    if isinstance(exc, ConnectionRefusedError):
        return f"{target} unreachable (connection refused)"
    if isinstance(exc, OSError):
        return f"{target} unreachable ({exc.strerror or exc})"
    return f"{target}: {type(exc).__name__}: {exc}"


class Connection:
    """An open SSH connection to one host, with a timeout on every command."""

    def __init__(self, host: HostSpec, conn: asyncssh.SSHClientConnection) -> None:
        self.host = host
        self.conn = conn

    async def run(self, command: str, *, check: bool = True, timeout_s: float = COMMAND_TIMEOUT_S,
                  input: str | None = None) -> Result:
        try:
            done = await asyncio.wait_for(self.conn.run(command, check=False, input=input), timeout_s)
        except TimeoutError:
            raise HostError(self.host.name, f"`{command[:80]}` did not end within {timeout_s:g} s") from None
        except (asyncssh.Error, OSError) as exc:
            raise HostError(self.host.name, _why(exc, self.host)) from None
        result = Result(done.exit_status if done.exit_status is not None else -1,
                        str(done.stdout or ""), str(done.stderr or ""))
        if check and result.exit_status != 0:
            last = (result.stderr.strip() or result.stdout.strip()).splitlines()[-1:] or ["no output"]
            raise HostError(self.host.name, f"`{command[:80]}` failed ({result.exit_status}): {last[0]}")
        return result

    async def put(self, local: Iterable[Path], remote_dir: str, *, mode: int | None = None) -> None:
        """Copy files into ``remote_dir`` (made if missing); ``mode`` for every copy (e.g. 0o600 for a secret)."""
        try:
            async with self.conn.start_sftp_client() as sftp:
                for path in local:
                    target = f"{remote_dir}/{path.name}"
                    await asyncio.wait_for(sftp.put(str(path), target), COMMAND_TIMEOUT_S)
                    if mode is not None:
                        await sftp.chmod(target, mode)
        except TimeoutError:
            raise HostError(self.host.name, f"copying to {remote_dir} took over {COMMAND_TIMEOUT_S:g} s") from None
        except (asyncssh.Error, OSError) as exc:
            raise HostError(self.host.name, f"copying to {remote_dir}: {exc}") from None

    async def close(self) -> None:
        self.conn.close()
        await self.conn.wait_closed()


async def connect(host: HostSpec) -> Connection:
    options: dict[str, Any] = {"username": host.ssh.user, "port": host.ssh.port,
                               "connect_timeout": host.ssh.timeout_s}
    if host.ssh.key is not None:
        options["client_keys"] = [str(host.ssh.key)]
    if host.ssh.known_hosts is not None:
        options["known_hosts"] = str(host.ssh.known_hosts)
    try:
        conn = await asyncio.wait_for(asyncssh.connect(host.address, **options), host.ssh.timeout_s + 5)
    except (asyncssh.Error, OSError, TimeoutError, ValueError) as exc:
        raise HostError(host.name, _why(exc, host)) from None
    return Connection(host, conn)


async def on_hosts(hosts: Iterable[HostSpec], job: Callable[[Connection], Awaitable[T]]
                   ) -> tuple[dict[str, T], list[HostError]]:
    """``job`` on every host in parallel, each on its own connection: the results and one error per failed host."""

    async def one(host: HostSpec) -> T:
        conn = await connect(host)
        try:
            return await job(conn)
        finally:
            await conn.close()

    hosts = list(hosts)
    outcomes = await asyncio.gather(*(one(h) for h in hosts), return_exceptions=True)
    results: dict[str, T] = {}
    errors: list[HostError] = []
    for host, outcome in zip(hosts, outcomes, strict=True):
        if isinstance(outcome, HostError):
            errors.append(outcome)
        elif isinstance(outcome, BaseException):
            errors.append(HostError(host.name, f"{type(outcome).__name__}: {outcome}"))
        else:
            results[host.name] = outcome
    return results, errors


def q(value: str | Path) -> str:
    return shlex.quote(str(value))
