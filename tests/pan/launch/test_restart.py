"""`pan run --restart on-failure`: a crashed or killed peer starts again, with back-off (issue 15, item 4)."""

from __future__ import annotations

import signal
from pathlib import Path

import psutil
import pytest

from pan.http.addresses import free_port
from pan.repository.client import RepositoryClient
from tests.conftest import HOST, Processes, forwarder, get_json, repeater, wait_until, workflow_dict

pytestmark = pytest.mark.process
STREAMS = ["SENSOR4"]


def peer_pid(run_pid: int, peer: str) -> int | None:
    for child in psutil.Process(run_pid).children():
        try:
            # A child that is just starting or exiting may show an empty command line.
            command = child.cmdline()
            if command and command[-1] == peer and child.status() != psutil.STATUS_ZOMBIE:
                return child.pid
        except psutil.Error:
            continue
    return None


async def healthy(port: int) -> bool:
    try:
        return (await get_json(f"http://{HOST}:{port}/health"))[0] == 200
    except OSError:
        return False


@pytest.mark.parametrize("policy", ["on-failure", "no"])
async def test_a_killed_peer_starts_again_only_with_the_restart_policy(processes: Processes, policy: str) -> None:
    specs = [forwarder("F", STREAMS, peer="p-forwarder"), repeater("R", STREAMS, 1, peer="p-rep")]
    data = workflow_dict(free_port(), specs, refresh_ms=300)
    path = processes.write_workflow(data)
    run = processes.pan("run", str(path), "--restart", policy, log_name="run")
    async with RepositoryClient((HOST, data["repository"]["port"]), timeout_s=30) as repository:
        await repository.wait_for_publishers(STREAMS, 120, publishers=2)
    first = peer_pid(run.pid, "p-rep")
    assert first is not None
    psutil.Process(first).send_signal(signal.SIGKILL)
    await wait_until(lambda: not psutil.pid_exists(first) or psutil.Process(first).status() == psutil.STATUS_ZOMBIE,
                     timeout_s=60)
    log = Path(processes.tmp / "run-0.log")
    if policy == "on-failure":
        await wait_until(lambda: (pid := peer_pid(run.pid, "p-rep")) is not None and pid != first, timeout_s=120)
        await wait_until(lambda: healthy(specs[1]["port"]), timeout_s=120, interval_s=0.1)
        await wait_until(lambda: "peer p-rep killed by SIGKILL; starting it again" in log.read_text(), timeout_s=30)
    else:
        await wait_until(lambda: "peer p-rep killed by SIGKILL" in log.read_text(), timeout_s=60)
        assert peer_pid(run.pid, "p-rep") is None and run.poll() is None  # the others go on
        assert await healthy(specs[0]["port"])
