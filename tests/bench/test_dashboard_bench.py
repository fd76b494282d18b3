"""`pan bench dashboard` (benchmarks/dashboard_bench.py): its options are checked before anything starts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.process
@pytest.mark.parametrize("args", [["--reps", "0"], ["--phase-s", "0"]])
def test_dashboard_bench_refuses_bad_options(args: list[str]) -> None:
    done = subprocess.run([sys.executable, "-m", "pan", "bench", "dashboard", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and "--reps must be >= 1 and --phase-s > 0" in done.stderr
    assert "Traceback" not in done.stderr
