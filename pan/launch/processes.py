"""Child processes owned by an asyncio program: started, awaited ready, stopped, never left behind.

Each child runs in a process group of its own, so a stop reaches whatever it
started too; it is tied to this process through the shared lifeline
(pan/launch/lifeline.py), so it dies with us even when we are SIGKILLed; and it is
stopped with SIGTERM (after SIGCONT, in case it was paused), then SIGKILL
when it has not ended within its grace period. ``kill_leftovers()`` ends
whatever a skipped stop left running.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from pan.launch.lifeline import shared_lifeline

#: Process groups of the children that are running; kill_leftovers() ends them if a normal stop was skipped.
LIVE_CHILDREN: set[int] = set()


def kill_leftovers() -> None:
    """SIGKILL every child group still running (the last resort of a program that is ending)."""
    for pid in list(LIVE_CHILDREN):
        _signal_group(pid, signal.SIGKILL)
        LIVE_CHILDREN.discard(pid)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the process group led by ``pid``; a group that is gone already is no error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


class Child:
    """One child process, optionally announcing its readiness with a first line on stdout.

    Its stderr (and stdout too when ``log`` names a file) is kept, so that a
    child that fails can say why: :meth:`stderr_tail`. A ``Child`` can be
    started again once stopped (a restart).
    """

    def __init__(
        self,
        args: Sequence[str],
        *,
        ready: bool = True,
        startup_s: float = 30.0,
        grace_s: float = 8.0,
        stdin: bool = False,
        env: dict[str, str] | None = None,
        cwd: str | Path | None = None,
        log: Path | None = None,
    ) -> None:
        """``ready``: wait up to ``startup_s`` for a first stdout line; ``log``: stdout and stderr go there."""
        self.args = list(args)
        self.ready = ready
        self.startup_s = startup_s
        self.grace_s = grace_s
        self.want_stdin = stdin
        self.env = env
        self.cwd = cwd
        self.log = log
        self.process: asyncio.subprocess.Process | None = None
        self.ready_line = b""
        self._stderr: IO[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    async def start(self) -> Child:
        """Spawn the child and, with ``ready``, wait for its ready line (stopping it if none comes)."""
        if self.log is not None:
            self._stderr = self.log.open("wb")
        else:
            self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())
        self.process = await asyncio.create_subprocess_exec(
            *self.args,
            stdin=asyncio.subprocess.PIPE if self.want_stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE if self.log is None else self._stderr,
            stderr=self._stderr,
            cwd=self.cwd,
            start_new_session=True,
            limit=2**24,
            **shared_lifeline().spawn_options(self.env),  # dies with us, even on SIGKILL
        )
        LIVE_CHILDREN.add(self.process.pid)
        if self.ready:
            try:
                self.ready_line = await self.readline(self.startup_s)
                if not self.ready_line:
                    raise RuntimeError(f"{shlex.join(self.args[:6])} did not start: {self.stderr_tail()}")
            except BaseException:
                await self.stop()
                raise
        return self

    async def readline(self, timeout_s: float) -> bytes:
        """The next stdout line, or b"" when none came within ``timeout_s``."""
        assert self.process is not None and self.process.stdout is not None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                return await self.process.stdout.readline()
        return b""

    async def send(self, line: bytes) -> None:
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(line if line.endswith(b"\n") else line + b"\n")
        await self.process.stdin.drain()

    async def output(self, timeout_s: float) -> bytes:
        """Everything the child writes on stdout until it ends (within ``timeout_s``); it is then reaped."""
        assert self.process is not None and self.process.stdout is not None
        async with asyncio.timeout(timeout_s):
            out = await self.process.stdout.read()
            await self.process.wait()
        return out

    def stderr_tail(self, chars: int = 2000) -> str:
        """The end of what the child wrote on stderr (its log file, if it has one)."""
        with contextlib.suppress(ValueError, OSError):
            if self.log is not None:
                return self.log.read_bytes()[-chars:].decode(errors="replace")
            if self._stderr is not None:
                self._stderr.seek(0)
                return self._stderr.read()[-chars:].decode(errors="replace")
        return ""

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the child's group (e.g. SIGSTOP and SIGCONT to pause it); nothing if it has ended."""
        if self.process is not None and self.process.returncode is None:
            _signal_group(self.process.pid, sig)

    async def __aenter__(self) -> Child:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def stop(self) -> int | None:
        """SIGCONT and SIGTERM to the group, SIGKILL after ``grace_s``; the exit code (None if not started)."""
        return await self._end(graceful=True)

    async def kill(self) -> int | None:
        """SIGKILL to the group at once (a crash, as a fault injector wants it); the exit code."""
        return await self._end(graceful=False)

    async def _end(self, graceful: bool) -> int | None:
        process, self.process = self.process, None
        if process is None:
            return None
        try:
            if process.returncode is None and graceful:
                _signal_group(process.pid, signal.SIGCONT)  # a paused child could not act on SIGTERM
                _signal_group(process.pid, signal.SIGTERM)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.grace_s):
                        await process.wait()
            if process.returncode is None:
                _signal_group(process.pid, signal.SIGKILL)
                await process.wait()
        finally:
            LIVE_CHILDREN.discard(process.pid)
            if self._stderr is not None:
                self._stderr.close()
        return process.returncode
