"""`pan replay` ends with a few lines for a person; the full JSON only with --json (issue 15, item 3)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from pan.launch.lifeline import shared_lifeline
from tests.conftest import ROOT
from tests.pan.launch.test_process_lifetime import STREAMS, write_split, write_workflow

pytestmark = pytest.mark.process


def test_replay_prints_a_short_summary_and_no_bar_off_a_terminal(tmp_path: Path) -> None:
    path, _ = write_workflow(tmp_path)
    data = write_split(tmp_path / "split", seconds=5)
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "pan", "replay", str(path), "--data", str(data), "--record",
                           str(out), "--quiet-s", "1"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          **shared_lifeline().spawn_options())
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert 5 <= len(lines) <= 15, done.stdout
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(done.stdout)
    table = {line.split("  ")[0].strip(): line for line in lines}
    assert "10" in table["rows fed"] and f"on {len(STREAMS)} streams" in table["output tuples"], done.stdout
    assert str(out) in table["recorded in"] and "none" in table["feed errors"], done.stdout
    assert "━" not in done.stderr and "ETA" not in done.stderr  # no bar in a pipe
    assert all((out / f"{stream}.jsonl").read_bytes().count(b"\n") == 5 for stream in STREAMS)
    assert (out / "logs" / "peer-p1.log").read_text().count("worker(s) running") == 1  # the peers' logs
