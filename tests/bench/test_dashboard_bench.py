"""`pan bench dashboard` (benchmarks/dashboard_bench.py): its options are checked before anything starts, and a
short run times tuples to a real browser's screen."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from benchmarks import chromium
from tests.conftest import ROOT


def bench(*args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pan", "bench", "dashboard", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout_s, check=False)


@pytest.mark.process
@pytest.mark.parametrize("args", [["--reps", "0"], ["--phase-s", "0"], ["--chromium", "0"], ["--chromium", "51"]])
def test_dashboard_bench_refuses_bad_options(args: list[str]) -> None:
    done = bench(*args, timeout_s=120)
    assert done.returncode == 2 and "--reps must be >= 1, --phase-s > 0 and --chromium in 1..50" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.heavy
@pytest.mark.timeout(1500)
def test_a_short_run_times_tuples_to_a_browsers_screen() -> None:
    if (why := chromium.missing()) is not None:
        pytest.skip(why)
    started_ns = time.time_ns()
    done = bench("--reps", "1", "--phase-s", "3", "--chromium", "2", timeout_s=1400)
    run_ms = (time.time_ns() - started_ns) / 1e6
    assert done.returncode == 0, done.stderr[-3000:]
    viewers = json.loads(done.stdout)["viewers"]
    for count, chromiums in (("1", 1), ("10", 2), ("50", 2)):
        row = viewers[count]
        assert row["phases"] == 1 and row["chromium"] == chromiums
        assert row["websocket_clients"] == int(count) - chromiums
        assert row["cpu_percent"]["median"] > 0  # the dashboard's CPU was read
        assert row["frames_drawn_per_s"]["median"] > 0  # the timed browser drew
    timed = [viewers[count]["screen_delay_ms"]["A1"] for count in ("1", "10", "50")]
    assert sum(d["count"] for d in timed) > 0, viewers  # positions drawn and matched to the rows sent
    for d in timed:
        if d["count"]:
            # Drawn after the row was sent, within this run: the page's clock and ours agree.
            assert 0 < d["p50_ms"] <= d["max_ms"] < run_ms
    assert viewers["pan_direct"]["delay_ms"]["A1"]["count"] > 0
