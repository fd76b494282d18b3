"""`pan replay --attach`: feed and record a workflow that runs already (as `pan deploy up` leaves one), starting
and stopping no peer of it. Costs ~15 s (one `pan run`, one replay of two halves of 1 s of two sensors, the
break skipped)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.debs import HALF1, HALF2
from tests.conftest import HOST, ROOT, Processes, forwarder, free_port, workflow_dict
from tests.simulator.split_folders import PS, rate_rows, write_split

pytestmark = pytest.mark.process

SECONDS = 2.0


def replay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pan", "replay", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300, check=False)


def test_attach_feeds_and_records_a_running_workflow_and_leaves_it_running(processes: Processes,
                                                                           tmp_path: Path) -> None:
    merge = {"name": "W", "type": "merge", "host": HOST, "port": free_port(), "inputs": ["SENSOR4", "SENSOR13"],
             "params": {"output": "XW", "clock_mode": "watermark"}}
    path = processes.write_workflow(workflow_dict(free_port(), [forwarder("F", ["SENSOR4", "SENSOR13"]), merge]))
    running = processes.pan("run", str(path))
    # Two halves, as a generated match has them: they end and begin far from the real whistles, and
    # --skip-halftime cuts the whole break (the gate of the unpaced replay steps over it).
    halves = [HALF1[0], HALF2[0] - PS]
    rows = {4: [ts for start in halves for ts in rate_rows(start, SECONDS / 2, 200)],
            13: [ts for start in halves for ts in rate_rows(start + 1, SECONDS / 2, 50)]}
    data = write_split(tmp_path / "split", rows)
    done = replay(str(path), "--attach", "--skip-halftime", "--data", str(data), "--record", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-3000:]
    merged = [json.loads(line) for line in (tmp_path / "out" / "XW.jsonl").read_text().splitlines()]
    assert sorted((t["ts"], t["sid"]) for t in merged) == sorted((ts, sid) for sid, s in rows.items() for ts in s)
    assert running.poll() is None  # the replay started no peer and stopped none


def test_attach_and_free_ports_exclude_each_other(tmp_path: Path) -> None:
    done = replay(str(ROOT / "workflows" / "forwarding_0_repeaters.json"), "--attach", "--free-ports", "--data",
                  str(tmp_path), "--record", str(tmp_path / "out"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == ("pan replay: --attach and --free-ports exclude each other (an attached workflow "
                                   "keeps its ports)")
