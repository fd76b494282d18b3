"""`pan bench ingest`: a tiny real run (structure, not numbers) and its argument errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.ingest_bench import READ_SIZES
from pan.launch.lifeline import shared_lifeline
from tests.bench.test_bench_cli import ROOT, bench


@pytest.mark.process
def test_ingest_tiny_compares_both_paths_and_writes_its_section(tmp_path: Path) -> None:
    report = tmp_path / "benchmarks.md"
    summary = bench("ingest", "--minutes", "0.02", "--reps", "1", "--feed", "per-sensor", "--write", str(report),
                    timeout=300)
    assert summary["benchmark"] == "ingest" and summary["config"]["feed"] == "per-sensor"
    assert summary["connections"] == summary["streams"] > 1 and summary["rows"] > 1000
    for path in ("line", "block"):
        assert summary["paths"][path]["rows_per_s"] > 0 and summary["paths"][path]["cpu_us_per_row"] > 0
        assert len(summary["runs"][path]) == 1
    assert summary["ratio_rows_per_s"] > 0 and summary["ratio_cpu_per_row"] > 0
    assert "block parser (numpy)" in summary["parse"]["us_per_row"]
    assert set(summary["render"]["us_per_row"]) == {"block render (one call per read)",
                                                    "per-row %-format (per-line path)", "dict + orjson"}
    sizes = summary["read_sizes"]
    assert list(sizes["us_per_row"]) == [str(n) for n in READ_SIZES] and sizes["rows"] > 0
    assert all(ways[way]["median"] > 0 for ways in sizes["us_per_row"].values() for way in ("block", "per line"))
    text = report.read_text()
    assert "<!-- ingest-bench:start -->" in text and "Block against per-line" in text
    assert "By lines per read" in text


@pytest.mark.process
@pytest.mark.parametrize("args", [["--reps", "0"], ["--minutes", "0"], ["--feed", "nope"]])
def test_ingest_bad_arguments_are_clear_errors(args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "pan", "bench", "ingest", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False, **shared_lifeline().spawn_options())
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and ("must be" in done.stderr or "invalid choice" in done.stderr)
