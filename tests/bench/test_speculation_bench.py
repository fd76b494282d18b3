"""`pan bench speculation --quick`: the report's shape, and that the modes' settled outputs agree (never speed)."""

from __future__ import annotations

import argparse
from pathlib import Path

import orjson
import pytest

from benchmarks import speculation
from tests.bench.test_bench_cli import bench, is_png
from tests.conftest import ROOT


@pytest.mark.heavy
@pytest.mark.timeout(1800)
def test_speculation_quick_reports_every_mode_with_equal_settled_outputs(tmp_path: Path) -> None:
    report = tmp_path / "benchmarks.md"
    results = bench("speculation", "--quick", "--max-load", "inf", "--write", str(report), timeout=1500)
    assert results["benchmark"] == "speculation" and results["config"]["reps"] == 1
    assert list(results["modes"]) == list(speculation.MODES)
    ordered = {w["name"] for w in orjson.loads((ROOT / "workflows" / "full_game_14_peers.json").read_bytes())["workers"]
               if "clock_mode" in w.get("params", {})}
    for mode, summary in results["modes"].items():
        run = results["runs"][mode][0]
        # The check the bench reports: every recorded settled stream equals the buffering run's, byte for byte.
        assert summary["settled_equal"] == 1 and run["settled_differ"] == [], (mode, run["settled_differ"])
        assert run["settled_tuples"] > 0 and not run["missed"]
        assert list(summary["streams"]) == speculation.DELAY_STREAMS
        for stream, s in summary["streams"].items():
            assert s["count"] == run["streams"][stream]["count"] > 0, (mode, stream)
            assert s["p50_ms_min"] <= s["p50_ms"] <= s["p50_ms_max"]
        assert set(summary["cpu_s"]) == ordered and all(c["median"] > 0 for c in summary["cpu_s"].values())
        assert summary["late"] == 0 and run["late_by_worker"] == {}
    assert not any(results["modes"]["buffering"]["snapshot_bytes_peak"].values())
    assert any(results["modes"]["alpha 1/3"]["snapshot_bytes_peak"].values())
    assert results["runs"]["alpha 1/3"][0]["premature"] > 0
    # "auto" speculates only while the machine has CPU to spare (ordering.cpu: machine): 14 peers on a small
    # machine may keep alpha at 1 throughout. Once alpha went below 1, events went out early.
    auto = results["runs"]["alpha auto"][0]
    lowest = min((a for points in auto["alpha"].values() for _, a in points), default=1.0)
    assert lowest == 1 or auto["premature"] > 0, (lowest, auto["premature"])
    hog = results["hog"]
    assert set(hog["alpha"]) == ordered and all(0 <= a <= 1 for points in hog["alpha"].values() for _, a in points)
    text = report.read_text()
    assert "## Speculative ordering units" in text and f"](img/{speculation.SECTION}.png)" in text
    assert text.count("| alpha 1/3 |") >= 2  # the delay table and the modes table
    assert is_png(tmp_path / "img" / f"{speculation.SECTION}.png")
    kept = orjson.loads((tmp_path / "results" / f"{speculation.SECTION}.json").read_bytes())
    assert kept["results"] == results


def test_speculation_refuses_bad_arguments_without_a_traceback(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    speculation.add_arguments(parser)
    assert speculation.run(parser.parse_args(["--reps", "0"])) == 2
    assert speculation.run(parser.parse_args(["--workflow", str(tmp_path / "missing.json")])) == 2
