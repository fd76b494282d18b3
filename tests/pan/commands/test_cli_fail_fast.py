"""`pan replay`, `pan run` and `pan simulate` check before they start and stop as soon as something fails
(issue 15, item 2): one line on stderr naming the problem, a non-zero exit, no traceback, within seconds."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import HOST, ROOT
from tests.pan.launch.test_process_lifetime import write_split, write_workflow

pytestmark = pytest.mark.process


def pan(*args: str, timeout_s: float = 120) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "pan", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout_s, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stderr.strip()


def test_replay_of_a_missing_data_folder_starts_nothing(tmp_path: Path) -> None:
    path, _ = write_workflow(tmp_path)
    code, err = pan("replay", str(path), "--data", str(tmp_path / "nodir"), "--record", str(tmp_path / "out"))
    assert code == 2 and err.count("\n") == 0 and "nodir" in err and "no such folder" in err
    assert not (tmp_path / "out").exists()  # nothing was started, not even the recording


def test_replay_of_a_folder_without_sensor_files_starts_nothing(tmp_path: Path) -> None:
    path, _ = write_workflow(tmp_path)
    (tmp_path / "empty").mkdir()
    code, err = pan("replay", str(path), "--data", str(tmp_path / "empty"), "--record", str(tmp_path / "out"))
    assert code == 2 and err.count("\n") == 0 and "no SENSOR<id>.csv files" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["replay", "run", "demo-forwarding"])
def test_a_port_in_use_is_named_before_anything_starts(tmp_path: Path, command: str) -> None:
    path, ports = write_workflow(tmp_path)
    data = write_split(tmp_path / "split", seconds=5)
    held_port = ports[2]  # the repeater's HTTP port
    args = {"replay": [str(path), "--data", str(data), "--record", str(tmp_path / "out")], "run": [str(path)],
            "demo-forwarding": ["--workflow", str(path)]}[command]
    with socket.socket() as held:
        held.bind((HOST, held_port))
        held.listen()
        code, err = pan(command, *args)
    assert code != 0 and err.count("\n") == 0, err
    assert f"worker R {HOST}:{held_port}" in err and "in use" in err


def test_simulate_into_a_receiver_that_is_down_fails(tmp_path: Path) -> None:
    path, _ = write_workflow(tmp_path)  # nothing runs it: the forwarder's ingest port refuses
    data = write_split(tmp_path / "split", seconds=5)
    code, err = pan("simulate", "--workflow", str(path), "--data", str(data), "--speedup", "0", "--quiet",
                    "--give-up-s", "2")
    assert code == 1, err
    last = err.splitlines()[-1]  # after the retries' warnings: why it failed, in one line
    assert last.startswith("pan simulate: 0 rows sent, 10 lost; SENSOR") and "refused" in last, err


def test_replay_stops_as_soon_as_a_peer_dies_and_names_it(tmp_path: Path) -> None:
    path, _ = write_workflow(tmp_path)
    data = write_split(tmp_path / "split", seconds=600)  # at --speedup 1: still feeding when the peer dies
    out = tmp_path / "out"
    replay = subprocess.Popen([sys.executable, "-m", "pan", "replay", str(path), "--data", str(data), "--record",
                               str(out), "--speedup", "1"], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not any(f.stat().st_size for f in out.glob("*.jsonl")):  # recording: the workflow is up
            assert replay.poll() is None and time.monotonic() < deadline, replay.communicate()
            time.sleep(0.2)
        peer = next(p for p in psutil.Process(replay.pid).children(recursive=True)
                    if p.cmdline()[-2:] == ["--name", "p2"])
        peer.send_signal(signal.SIGKILL)
        _, err = replay.communicate(timeout=60)  # the feed alone would take ten minutes
    finally:
        if replay.poll() is None:
            replay.kill()
            replay.communicate()
    assert replay.returncode == 1 and "Traceback" not in err, err
    reason = next((line for line in err.splitlines() if line.startswith("pan replay: ")), "")
    assert reason.startswith("pan replay: peer p2 killed by SIGKILL") and "peer-p2.log" in reason, err
    assert "worker(s) running" in err  # the end of the peer's log
