"""The thesis' WeakTrueTime experiment in miniature (seed 003 §5.1, issue 3 acceptance).

Two `pan simulate` processes replay half of the sensors each into one debugging
receiver; one process pretends its clock is 20 s ahead.  Both are told the same
start time.  Without WTT the fast one replays 20 s further into the match, so
the sensors' latest timestamps form two groups 20 s apart (spread ~10 s); with
WTT both follow the master's clock and the spread stays within a few check periods.
"""

from __future__ import annotations

import asyncio
import json
import signal
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

from pan.http.addresses import free_port
from simulator.debs import HALF1
from simulator.receiver import DebugReceiver
from tests.conftest import Processes, forwarder, sensor_row, wait_until, workflow_dict

PS = 10**12
SENSORS = [13, 14, 97, 98, 47, 16]
SECONDS = 40
HZ = 200


def write_split(folder: Path) -> Path:
    folder.mkdir(parents=True)
    period = PS // HZ
    for sid in SENSORS:
        rows = (sensor_row(sid, HALF1[0] + n * period, n) for n in range(SECONDS * HZ))
        (folder / f"SENSOR{sid}.csv").write_text("\n".join(rows) + "\n")
    return folder


@pytest.fixture
async def receiver() -> Any:
    rec = DebugReceiver()
    await rec.start()
    yield rec
    await rec.stop()


async def spread(receiver: DebugReceiver, samples: int = 7, every_s: float = 0.3) -> dict[str, float]:
    """Median over several snapshots (one snapshot can catch a process mid-write on a busy machine)."""
    await wait_until(lambda: len(receiver.sensor_latest()) == len(SENSORS), timeout_s=30)
    await asyncio.sleep(1.0)  # let both processes catch up to their pace
    snaps = []
    for _ in range(samples):
        snaps.append(receiver.stats())
        await asyncio.sleep(every_s)
    return {key: statistics.median(s[key] for s in snaps) for key in ("std_ms", "median_diff_ms")}


def run_pair(processes: Processes, workflow: Path, data: Path, start_ms: int,
             wtt: tuple[list[str], list[str]] = ([], [])) -> list[Any]:
    common = ["simulate", "--workflow", str(workflow), "--data", str(data), "--speedup", "1",
              "--start-at", str(start_ms), "--quiet"]
    half = len(SENSORS) // 2
    normal = processes.pan(*common, "--sensors", ",".join(map(str, SENSORS[:half])), *wtt[0], log_name="sim-a")
    ahead = processes.pan(*common, "--sensors", ",".join(map(str, SENSORS[half:])), "--clock-offset-ms", "20000",
                          *wtt[1], log_name="sim-b")
    return [normal, ahead]


async def stop(procs: list[Any], receiver: DebugReceiver) -> None:
    """Stop both simulators, drain what they sent, and start the receiver afresh."""
    for proc in procs:
        proc.send_signal(signal.SIGINT)
    await wait_until(lambda: all(proc.poll() is not None for proc in procs), timeout_s=20, interval_s=0.1)
    assert [proc.returncode for proc in procs] == [0, 0]
    await wait_until(lambda: receiver.open_connections == 0)
    receiver.reset()


def summary(tmp: Path, log_name: str) -> dict[str, Any]:
    """The JSON summary a simulator prints at exit (its log also holds stderr lines)."""
    text = (tmp / log_name).read_text()
    return json.loads(text[text.index("\n{\n") + 1 :] if not text.startswith("{") else text)


@pytest.mark.process
async def test_two_simulators_20_s_apart_without_and_with_wtt(
    processes: Processes, receiver: DebugReceiver, tmp_path: Path
) -> None:
    data = write_split(tmp_path / "split")
    streams = [f"SENSOR{sid}" for sid in SENSORS]
    workflow = processes.write_workflow(
        workflow_dict(free_port(), [forwarder("Receiver", streams, ingest_port=receiver.port)]))

    # Without WTT: same start time, but one clock is 20 s ahead.
    procs = run_pair(processes, workflow, data, int(time.time() * 1000) + 1000)
    without = await spread(receiver)
    await stop(procs, receiver)

    wtt_port = free_port()
    procs = run_pair(processes, workflow, data, int(time.time() * 1000) + 3000,
                     (["--wtt-master", f"127.0.0.1:{wtt_port}"], ["--wtt-slave", f"127.0.0.1:{wtt_port}"]))
    with_wtt = await spread(receiver)
    await stop(procs, receiver)
    print(json.dumps({"without_wtt": without, "with_wtt": with_wtt}))
    slave = summary(tmp_path, "sim-b-3.log")
    assert slave["wtt"]["role"] == "slave" and abs(slave["wtt"]["delta_ns"] + 20 * 10**9) < 50 * 10**6
    assert slave["lost"] == 0 and slave["sent"] > 0

    assert 9_000 < without["median_diff_ms"] < 11_000  # half the offset: two groups of three sensors
    assert 9_000 < without["std_ms"] < 12_500  # 20 s / 2 * sqrt(6/5) = 10.95 s for the sample std
    assert with_wtt["std_ms"] < 50 and with_wtt["median_diff_ms"] < 50
