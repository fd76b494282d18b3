"""Children that die with their launcher, even when the launcher is SIGKILLed.

A launcher that is killed outright cannot stop its children, and children
left running keep their ports, so the next launch fails with "address already
in use". Three mechanisms, each covering the others' gaps:

* **Lifeline pipe** (portable). The launcher creates a pipe and keeps its
  only write end; each child inherits the read end. When the launcher's
  process ends, however it ends, the kernel closes the write end and the
  child reads end-of-file. The pipe exists before the child is forked, so a
  launcher that dies while the child is still starting up is noticed as soon
  as the child starts watching.
* **PR_SET_PDEATHSIG** (Linux). Set in the child between fork and exec, so
  the kernel sends SIGTERM the moment the parent dies. It fires when the
  parent *thread* exits, so it is only set when spawning from the main
  thread; the usual race check (is the parent still the expected pid?)
  follows it, because a parent that died before the call sends nothing.
* **Process group.** Children stay in the launcher's process group, so a
  terminal's Ctrl-C and ``kill -- -PGID`` reach all of them at once.

On a broken lifeline the child signals SIGTERM to itself: it stops exactly as
if its launcher had stopped it (workers unpublish). Should that clean stop
hang, the child exits hard after :data:`ORPHAN_GRACE_S`.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

#: Environment variable naming the inherited read end of the lifeline pipe.
LIFELINE_FD_ENV = "PAN_LIFELINE_FD"
#: Environment variable naming the launcher's pid, for the child's race check.
LAUNCHER_PID_ENV = "PAN_LAUNCHER_PID"
#: Signal a child receives when its launcher is gone: the same clean stop as a launcher's own stop.
ORPHAN_SIGNAL = signal.SIGTERM
#: A child whose launcher is gone and that has not stopped cleanly within this many seconds exits hard.
#: Longer than a launcher's own stop (peers, then the repository, each with their grace period).
ORPHAN_GRACE_S = 30.0
#: Exit status of that hard exit.
ORPHAN_EXIT_CODE = 3

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


_prctl = _load_prctl()  # resolved once, before any fork: nothing is looked up in a forked child


def set_parent_death_signal(sig: int = ORPHAN_SIGNAL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies (Linux only)."""
    return _prctl is not None and _prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0


def _die_with(parent_pid: int) -> Callable[[], None]:
    """A ``preexec_fn``: parent-death signal, then the race check (the parent may already be gone)."""

    def preexec() -> None:
        set_parent_death_signal()
        if os.getppid() != parent_pid:
            os._exit(ORPHAN_EXIT_CODE)

    return preexec


class Lifeline:
    """The launcher's side: one pipe whose write end only this process holds.

    ``spawn_options()`` gives the keyword arguments for ``subprocess.Popen`` or
    ``asyncio.create_subprocess_exec`` that tie a child to this process. Keep
    the object alive as long as the children should live; ``close()`` (or the
    launcher's death) cuts the line.
    """

    def __init__(self) -> None:
        self._read_fd, self._write_fd = os.pipe()  # both non-inheritable; only the read end is passed on

    def spawn_options(self, env: dict[str, str] | None = None) -> dict[str, Any]:
        child_env = dict(os.environ if env is None else env)
        child_env[LIFELINE_FD_ENV] = str(self._read_fd)
        child_env[LAUNCHER_PID_ENV] = str(os.getpid())
        options: dict[str, Any] = {"pass_fds": (self._read_fd,), "env": child_env}
        if _prctl is not None and threading.current_thread() is threading.main_thread():
            options["preexec_fn"] = _die_with(os.getpid())
        return options

    def close(self) -> None:
        for fd in (self._read_fd, self._write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._read_fd = self._write_fd = -1

    def __enter__(self) -> Lifeline:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


_shared: Lifeline | None = None


def shared_lifeline() -> Lifeline:
    """One lifeline for the whole process, never closed: what it ties lives at most as long as we do.

    For launchers that start children now and then (benchmarks) rather than
    as one group they stop together.
    """
    global _shared
    if _shared is None:
        _shared = Lifeline()
    return _shared


def die_with_launcher() -> None:
    """The child's side: stop (as on SIGTERM) when the process that started us is gone.

    Call it first thing in a long-lived command, before its SIGTERM handling
    is installed (a signal that arrives earlier ends the process by default,
    which is just as right). A no-op when not started through a :class:`Lifeline`.
    """
    fd_text = os.environ.pop(LIFELINE_FD_ENV, None)
    launcher_text = os.environ.pop(LAUNCHER_PID_ENV, None)
    if fd_text is None:
        return
    try:
        fd = int(fd_text)
        os.set_inheritable(fd, False)  # our own children get their own line, never ours
    except (ValueError, OSError):
        log.warning("ignoring %s=%r: not an open file descriptor", LIFELINE_FD_ENV, fd_text)
        return
    if launcher_text is not None and launcher_text.isdigit() and os.getppid() != int(launcher_text):
        # The launcher died before the death signal was armed; nothing has started yet, so just leave.
        os.close(fd)
        log.warning("launcher (pid %s) is gone; not starting", launcher_text)
        raise SystemExit(ORPHAN_EXIT_CODE)
    threading.Thread(target=_watch, args=(fd,), name="lifeline", daemon=True).start()


def _watch(fd: int) -> None:
    """Block until the launcher's end of the pipe closes, then stop as on SIGTERM (or, failing that, hard)."""
    with contextlib.suppress(OSError):
        while os.read(fd, 512):
            pass
    with contextlib.suppress(OSError):
        os.close(fd)
    log.warning("launcher is gone; stopping")
    os.kill(os.getpid(), ORPHAN_SIGNAL)
    threading.Event().wait(ORPHAN_GRACE_S)
    log.error("still running %.0f s after the launcher died; exiting", ORPHAN_GRACE_S)
    os._exit(ORPHAN_EXIT_CODE)
