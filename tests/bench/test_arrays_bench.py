"""`pan bench arrays`: a tiny real run (structure, not numbers) and its argument error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.test_bench_cli import ROOT, bench


@pytest.mark.process
def test_arrays_quick_times_both_paths_of_each_component_with_column_inputs(tmp_path: Path) -> None:
    report = tmp_path / "benchmarks.md"
    summary = bench("arrays", "--quick", "--reps", "1", "--write", str(report), timeout=600)
    assert summary["benchmark"] == "arrays" and set(summary["components"]) == {"player_average", "active_ball"}
    for entry in summary["components"].values():
        assert entry["rows"] > 1000 and entry["min_array_rows"] > 1
        assert all(s["arrays_us"] > 0 and s["events_us"] > 0 for s in entry["by_size"].values())
    text = report.read_text()
    assert "<!-- arrays-bench:start -->" in text and "`MIN_ARRAY_ROWS` is" in text


@pytest.mark.process
def test_arrays_refuses_zero_reps() -> None:
    done = subprocess.run([sys.executable, "-m", "pan", "bench", "arrays", "--reps", "0"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--reps must be >= 1" in done.stderr and "Traceback" not in done.stderr
