"""Children die with their launcher (issue 10, finding 10).

A SIGKILLed `pan run` used to leave the repository and every peer running and
holding their ports, so the next `pan run` failed with "address already in
use". Real processes, real ports: `pan run` (and `pan replay`) are started,
killed in various ways, and every process they started must be gone and
every port free afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psutil
import pytest

from pan.http.addresses import free_port
from tests.conftest import HOST, ROOT, forwarder, repeater, wait_until, workflow_dict

pytestmark = pytest.mark.timeout(240)

STARTUP_S = 60.0  # a loaded machine takes a while to import and start three Python processes
GONE_S = 60.0  # children stop cleanly (unpublish, close servers) before they exit
STREAMS = ["SENSOR4", "SENSOR47"]


class Spawned:
    """`pan` commands started as a shell starts a job (own process group), all killed at teardown."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen[bytes]] = []
        self.seen: dict[int, psutil.Process] = {}  # every descendant we ever saw, killed at teardown if alive

    def pan(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with open(self.tmp / f"pan-{len(self.procs)}.log", "wb") as log:  # the child keeps its own copy
            proc = subprocess.Popen(
                [sys.executable, "-m", "pan", *args], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                start_new_session=True, env=None if env is None else {**os.environ, **env},
            )
        self.procs.append(proc)
        return proc

    def log(self, index: int = 0) -> str:
        return (self.tmp / f"pan-{index}.log").read_text(errors="replace")[-3000:]

    def descendants(self, proc: subprocess.Popen[bytes]) -> list[psutil.Process]:
        found = psutil.Process(proc.pid).children(recursive=True)
        self.seen.update((p.pid, p) for p in found)
        return found

    def cleanup(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for process in self.seen.values():  # a child that left the group is still ours to kill
            with contextlib.suppress(psutil.Error):
                process.kill()


@pytest.fixture
def spawned(tmp_path: Path) -> Iterator[Spawned]:
    group = Spawned(tmp_path)
    yield group
    group.cleanup()


def write_workflow(tmp: Path) -> tuple[Path, list[int]]:
    """A forwarder and a repeater on two peers; returns the file and every port it uses."""
    repo_port = free_port()
    specs = [forwarder("F", STREAMS, peer="p1"), repeater("R", STREAMS, 1, peer="p2")]
    path = tmp / "workflow.json"
    path.write_bytes(orjson.dumps(workflow_dict(repo_port, specs, refresh_ms=300)))
    ports = [repo_port, *(s["port"] for s in specs), specs[0]["params"]["ingest_port"]]
    return path, ports


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}/health", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


def port_free(port: int) -> bool:
    """True if a server could listen on ``port`` now (as our servers do: with SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def gone(process: psutil.Process) -> bool:
    """Exited (a zombie awaiting a reaper counts: it holds no port and runs no code)."""
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def wait_healthy(http_ports: list[int], spawned: Spawned, index: int = 0) -> None:
    try:
        await wait_until(lambda: all(healthy(p) for p in http_ports), timeout_s=STARTUP_S, interval_s=0.2)
    except AssertionError:
        raise AssertionError(f"the workflow did not come up:\n{spawned.log(index)}") from None


async def wait_everything_gone(children: list[psutil.Process], ports: list[int]) -> None:
    def left() -> list[str]:
        alive = [f"pid {p.pid}" for p in children if not gone(p)]
        held = [f"port {port}" for port in ports if not port_free(port)]
        return alive + held

    try:
        await wait_until(lambda: not left(), timeout_s=GONE_S, interval_s=0.2)
    except AssertionError:
        raise AssertionError(f"left behind: {', '.join(left())}") from None


async def start_run(spawned: Spawned, path: Path, ports: list[int]) -> tuple[subprocess.Popen[bytes], list[Any]]:
    index = len(spawned.procs)
    run = spawned.pan("run", str(path))
    await wait_healthy(ports[:3], spawned, index)
    children = spawned.descendants(run)
    assert len(children) == 3, [c.cmdline() for c in children]  # repository + 2 peers
    return run, children


STOPS = {  # how pan run is stopped -> (signal, to its whole process group?, exit status of pan run)
    "sigkill": (signal.SIGKILL, False, -signal.SIGKILL),
    "sigterm": (signal.SIGTERM, False, 0),
    "ctrl-c": (signal.SIGINT, True, 0),  # what a terminal does: SIGINT to the foreground process group
    "kill-pgid": (signal.SIGTERM, True, 0),  # kill -- -PGID
}


@pytest.mark.process
@pytest.mark.parametrize("how", list(STOPS))
async def test_pan_run_stopped_in_any_way_leaves_no_child_and_no_port(
    spawned: Spawned, tmp_path: Path, how: str
) -> None:
    sig, to_group, status = STOPS[how]
    path, ports = write_workflow(tmp_path)
    run, children = await start_run(spawned, path, ports)
    assert all(os.getpgid(c.pid) == run.pid for c in children)  # the children are in pan run's group

    if to_group:
        os.killpg(run.pid, sig)
    else:
        run.send_signal(sig)
    assert run.wait(timeout=GONE_S) == status, spawned.log()
    await wait_everything_gone(children, ports)
    assert "exited with code" not in spawned.log()  # no child died on its own before pan run stopped it


@pytest.mark.slow
async def test_pan_run_starts_again_on_the_same_ports_after_a_sigkill(spawned: Spawned, tmp_path: Path) -> None:
    """The finding as reported: the next `pan run` failed with "address already in use"."""
    path, ports = write_workflow(tmp_path)
    run, children = await start_run(spawned, path, ports)
    run.send_signal(signal.SIGKILL)
    assert run.wait(timeout=10) == -signal.SIGKILL
    await wait_everything_gone(children, ports)

    again, _ = await start_run(spawned, path, ports)
    again.send_signal(signal.SIGTERM)
    assert again.wait(timeout=GONE_S) == 0, spawned.log(1)


def write_split(folder: Path, seconds: int) -> Path:
    """A tiny `pan split` folder: two sensors, one row per second of event time for ``seconds``."""
    folder.mkdir()
    start = 10_753_295_594_424_447
    for stream in STREAMS:
        sid = stream.removeprefix("SENSOR")
        rows = (f"{sid},{start + k * 10**12},29000,0,138,8001750,1365108,0,10000,0,10000,0,0" for k in range(seconds))
        (folder / f"{stream}.csv").write_text("\n".join(rows) + "\n")
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
async def test_a_killed_pan_replay_leaves_nothing_behind(spawned: Spawned, tmp_path: Path, sig: int) -> None:
    """`pan replay` has no SIGTERM handler of its own: either signal ends it at once, and its workflow must follow."""
    path, ports = write_workflow(tmp_path)
    data = write_split(tmp_path / "split", seconds=600)  # at --speedup 1: still feeding when killed
    replay = spawned.pan("replay", str(path), "--data", str(data), "--record", str(tmp_path / "out"),
                         "--speedup", "1")
    await wait_healthy(ports[:3], spawned)
    descendants = spawned.descendants(replay)  # pan run, the repository, 2 peers
    assert len(descendants) == 4, [c.cmdline() for c in descendants]

    replay.send_signal(sig)
    assert replay.wait(timeout=10) == -sig
    await wait_everything_gone(descendants, ports)


CHILD = ("import time; from pan.launch.lifeline import die_with_launcher; die_with_launcher(); "
         "print('ready', flush=True); time.sleep(120)")


async def run_launcher(script: str) -> asyncio.subprocess.Process:
    """A Python launcher built from ``script`` (which defines ``CHILD``, the child's code); prints the child's pid."""
    code = f"import os, subprocess, sys, threading, time\nfrom pan.launch.lifeline import Lifeline\nCHILD = {CHILD!r}\n"
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", code + textwrap.dedent(script), cwd=ROOT, stdout=subprocess.PIPE
    )


async def read_child(launcher: asyncio.subprocess.Process, spawned: Spawned) -> psutil.Process:
    assert launcher.stdout is not None
    async with asyncio.timeout(60):
        line = await launcher.stdout.readline()
    assert line.strip().isdigit(), line
    child = psutil.Process(int(line))
    spawned.seen[child.pid] = child
    return child


@pytest.mark.process
async def test_a_child_whose_launcher_died_before_it_started_stops_at_once(spawned: Spawned) -> None:
    """The race the pipe and the pid check close, without the parent-death signal (spawned off the main thread)."""
    launcher = await run_launcher(
        """
        lifeline, started = Lifeline(), []
        def spawn():
            options = lifeline.spawn_options()
            assert "preexec_fn" not in options  # no parent-death signal off the main thread
            started.append(subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.DEVNULL, **options))
        thread = threading.Thread(target=spawn)
        thread.start()
        thread.join()
        print(started[0].pid, flush=True)
        os._exit(0)  # gone before the child has even imported anything
        """
    )
    child = await read_child(launcher, spawned)
    assert await launcher.wait() == 0
    await wait_everything_gone([child], [])


@pytest.mark.process
async def test_a_child_spawned_by_a_thread_that_ended_lives_until_its_launcher_dies(spawned: Spawned) -> None:
    """PR_SET_PDEATHSIG fires when the parent *thread* exits: it must not be armed for such a child."""
    launcher = await run_launcher(
        """
        lifeline, started = Lifeline(), []
        def spawn():
            started.append(subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE,
                                            **lifeline.spawn_options()))
        thread = threading.Thread(target=spawn)
        thread.start()
        thread.join()  # the spawning thread is gone ...
        assert started[0].stdout.readline() == b"ready\\n"  # ... and the child is still there, watching
        print(started[0].pid, flush=True)
        time.sleep(120)
        """
    )
    child = await read_child(launcher, spawned)
    assert not gone(child)
    launcher.kill()
    await launcher.wait()
    await wait_everything_gone([child], [])


@pytest.mark.process
@pytest.mark.parametrize(
    "wrapper",
    ["pan.launch.processes.Child(ARGS)", "benchmarks.common.Child(ARGS)"],
    ids=["processes", "benchmarks"],
)
async def test_a_benchmark_child_dies_with_the_benchmark(spawned: Spawned, wrapper: str) -> None:
    """The child-process helper, as such and as the benchmarks use it: a SIGKILLed benchmark leaves no child (which
    never watches any pipe)."""
    bench = textwrap.dedent(
        f"""
        import asyncio, sys, time
        import benchmarks.common, pan.launch.processes
        ARGS = [sys.executable, "-c", "print('ready', flush=True); import time; time.sleep(120)"]

        async def main():
            child = {wrapper}
            await child.__aenter__()
            print(child.process.pid, flush=True)
            await asyncio.sleep(120)

        asyncio.run(main())
        """
    )
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", bench, cwd=ROOT, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(60):
            pid = int(await proc.stdout.readline())
        child = psutil.Process(pid)
        spawned.seen[pid] = child
    finally:
        proc.kill()
        await proc.wait()
    await wait_everything_gone([child], [])


@pytest.mark.process
async def test_a_terminated_benchmark_stops_its_processes_and_removes_its_folder(
    spawned: Spawned, tmp_path: Path
) -> None:
    """`pan bench` stops on SIGTERM as on Ctrl-C: its children are stopped and its temporary folder removed
    (Python's default ends it on the spot: a SIGTERMed `pan bench distribution` left its folder behind)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    bench = spawned.pan("bench", "replay", "--quick", "--reps", "1", "--wires", "json", "--floor-reps", "0",
                        env={"TMPDIR": str(scratch)})
    # The match is generated in the bench's folder, then `pan replay` starts `pan run`, the repository and 3 peers.
    await wait_until(lambda: len(spawned.descendants(bench)) >= 6 or bench.poll() is not None, timeout_s=180)
    assert bench.poll() is None, spawned.log()
    children = spawned.descendants(bench)
    folders = [p.name for p in scratch.iterdir()]
    assert folders and all(name.startswith("pan-replay-bench-") for name in folders)
    bench.send_signal(signal.SIGTERM)
    await wait_until(lambda: bench.poll() is not None, timeout_s=GONE_S)
    assert bench.returncode == 130 and "interrupted (SIGTERM)" in spawned.log(), spawned.log()
    assert not list(scratch.iterdir())
    await wait_everything_gone(children, [])
