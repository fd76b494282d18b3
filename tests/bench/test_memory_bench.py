"""`pan bench memory`: a tiny real run (structure, not numbers) and its argument errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.test_bench_cli import ROOT, bench


@pytest.mark.process
def test_memory_tiny_fills_both_kinds_of_buffer_and_writes_its_section(tmp_path: Path) -> None:
    report = tmp_path / "benchmarks.md"
    summary = bench("memory", "--tuples", "500", "--reps", "1", "--write", str(report), timeout=300)
    assert summary["benchmark"] == "memory" and summary["config"]["tuples_per_stream"] == 500
    for kind, columns in (("columns", True), ("json", False)):
        (run,) = summary["runs"][kind]
        assert run["column_buffers"] is columns and run["buffered_tuples"] == 100 * 500
        assert run["filled_worker_rss_mb"] > run["worker_empty_buffers_rss_mb"] > 0
    text = report.read_text()
    assert "<!-- memory-bench:start -->" in text and "Columns against JSON" in text


@pytest.mark.process
@pytest.mark.parametrize("args", [["--reps", "0"], ["--tuples", "2"], ["--tuples", "20000"]])
def test_memory_bad_arguments_are_clear_errors(args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "pan", "bench", "memory", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--reps must be >= 1 and --tuples in 5..10000" in done.stderr
