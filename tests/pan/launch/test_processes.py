"""pan.launch.processes.Child with real child processes: readiness, output, stop (SIGTERM, then SIGKILL), kill,
restart."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from pan.launch import processes
from pan.launch.processes import Child
from tests.conftest import wait_until

pytestmark = pytest.mark.process

READY = "import sys, time; print('ready', flush=True); print('oops', file=sys.stderr, flush=True); time.sleep(120)"
#: Ignores SIGTERM: only the SIGKILL after the grace period ends it.
STUBBORN = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
            "time.sleep(120)")


def log_text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def test_waits_for_the_ready_line_and_stops_with_sigterm() -> None:
    async with Child([sys.executable, "-c", READY]) as child:
        assert child.ready_line == b"ready\n"
        pid = child.pid
        assert os.getpgid(pid) == pid  # a process group of its own
        assert pid in processes.LIVE_CHILDREN
    assert gone(pid) and pid not in processes.LIVE_CHILDREN


async def test_a_child_that_never_gets_ready_is_stopped_and_says_why() -> None:
    code = "import sys, time; print('no luck here', file=sys.stderr, flush=True); time.sleep(120)"
    child = Child([sys.executable, "-c", code], startup_s=3.0)
    with pytest.raises(RuntimeError, match="did not start: no luck here"):
        await child.start()
    assert child.process is None and not processes.LIVE_CHILDREN


async def test_stop_kills_a_child_that_ignores_sigterm_after_the_grace_period() -> None:
    child = await Child([sys.executable, "-c", STUBBORN], grace_s=1.0).start()
    started = time.monotonic()
    code = await child.stop()
    assert code == -9 and 1.0 <= time.monotonic() - started < 30


async def test_stop_resumes_a_paused_child_so_that_it_ends_cleanly() -> None:
    import signal

    child = await Child([sys.executable, "-c", READY], grace_s=30.0).start()
    child.signal(signal.SIGSTOP)
    started = time.monotonic()
    assert await child.stop() == -signal.SIGTERM and time.monotonic() - started < 15


async def test_output_collects_stdout_until_the_end_and_stderr_is_kept() -> None:
    code = "import sys; print('a'); print('b'); print('warned', file=sys.stderr)"
    async with Child([sys.executable, "-c", code], ready=False) as child:
        assert await child.output(60) == b"a\nb\n"
        assert child.process is not None and child.process.returncode == 0
        assert "warned" in child.stderr_tail()


async def test_send_reaches_the_child_stdin() -> None:
    code = "import sys; print('ready', flush=True); print(sys.stdin.readline().strip().upper(), flush=True)"
    async with Child([sys.executable, "-c", code], stdin=True) as child:
        await child.send(b"hello")
        assert await child.readline(30) == b"HELLO\n"


async def test_kill_and_restart_log_each_start_to_its_file(tmp_path: Path) -> None:
    child = Child([sys.executable, "-c", READY], ready=False, log=tmp_path / "one.log")
    await child.start()
    first = child.pid
    await wait_until(lambda: "oops" in log_text(tmp_path / "one.log"), 30)
    assert await child.kill() == -9 and gone(first)
    child.log = tmp_path / "two.log"
    await child.start()
    assert child.pid != first
    await wait_until(lambda: "ready" in log_text(tmp_path / "two.log"), 30)
    assert "oops" in child.stderr_tail()
    await child.stop()
    assert (tmp_path / "one.log").read_text() == "ready\noops\n"


async def test_kill_leftovers_ends_children_whose_stop_was_skipped() -> None:
    child = await Child([sys.executable, "-c", READY]).start()
    pid = child.pid
    processes.kill_leftovers()
    assert not processes.LIVE_CHILDREN
    assert child.process is not None
    await child.process.wait()
    assert gone(pid)
    await child.stop()
