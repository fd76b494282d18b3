"""Results files, the load gate before `--write`, and `pan bench compare` (issue 18)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import results
from tests.conftest import ROOT


def test_write_is_refused_above_the_load_limit_and_allowed_below() -> None:
    assert results.load_refusal("docs/benchmarks.md", 2.0, load_1min=2.5) is not None
    assert "--max-load 4" in (results.load_refusal("docs/benchmarks.md", 2.0, load_1min=2.5) or "")
    assert results.load_refusal("docs/benchmarks.md", 2.0, load_1min=1.5) is None
    assert results.load_refusal(None, 0.0, load_1min=9.0) is None  # printing alone is never refused
    assert results.load_refusal("x.md", float("inf"), load_1min=99.0) is None


def test_the_default_limit_is_the_core_count_unless_the_environment_says(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(results.ENV_MAX_LOAD, raising=False)
    assert results.default_max_load() == float(os.cpu_count() or 1)
    monkeypatch.setenv(results.ENV_MAX_LOAD, "3.5")
    assert results.default_max_load() == 3.5


def test_figures_flatten_nested_results_and_reduce_sample_lists_to_their_median() -> None:
    samples = list(range(1, 20))  # more than SAMPLES_FROM numbers: raw samples
    got = dict(results.figures({"machine": {"cores": 2}, "a": {"b": 2, "ok": True, "none": None},
                                "c": [{"d": 1.5}, {"d": 3}], "s": samples, "short": [4, 5]}))
    assert got == {"a.b": 2.0, "c[0].d": 1.5, "c[1].d": 3.0, f"s (median of {len(samples)})": 10.0,
                   "short[0]": 4.0, "short[1]": 5.0}


def test_compare_pairs_shared_figures_with_their_ratio_and_counts_the_rest() -> None:
    kept = {"benchmark": "x", "date": "d", "results": {"rows_per_s": 100.0, "old": 1}}
    table = results.compare(kept, {"rows_per_s": 150.0, "new": 2})
    assert table["rows"] == [{"figure": "rows_per_s", "a": 100.0, "b": 150.0, "ratio": 1.5}]
    assert table["only_a"] == ["old"] and table["only_b"] == ["new"]
    assert results.compare({"z": 0}, {"z": 3})["rows"][0]["ratio"] is None


def pan_bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pan", "bench", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.mark.process
def test_write_refused_by_the_cli_leaves_no_report(tmp_path: Path) -> None:
    if os.getloadavg()[0] == 0.0:
        pytest.skip("the load average is exactly 0: no limit is below it")
    report = tmp_path / "benchmarks.md"
    done = pan_bench("ordering", "--events", "1000", "--streams", "2", "--reps", "1", "--write", str(report),
                     "--max-load", "0")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("pan bench ordering: the load average is ") and "--write is refused" in done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    assert not report.exists() and not (tmp_path / "results").exists()


@pytest.mark.process
def test_a_written_report_keeps_its_results_and_compare_reads_them(tmp_path: Path) -> None:
    report = tmp_path / "benchmarks.md"
    done = pan_bench("ordering", "--events", "2000", "--streams", "2", "--reps", "1", "--write", str(report))
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    kept_path = tmp_path / "results" / "ordering-bench.json"
    kept = json.loads(kept_path.read_text())
    assert kept["results"] == printed and kept["benchmark"] == "ordering-bench"
    assert len(kept["machine"]["load_avg"]) == 3 and len(kept["load_avg_at_end"]) == 3
    mine = tmp_path / "mine.json"
    mine.write_text(done.stdout)
    compared = pan_bench("compare", str(kept_path), str(mine), "--json")
    assert compared.returncode == 0, compared.stderr
    rows = json.loads(compared.stdout)["rows"]
    assert {r["figure"] for r in rows} == set(dict(results.figures(printed)))
    assert all(r["ratio"] in (1.0, None) for r in rows)  # the same run on both sides
    table = pan_bench("compare", str(kept_path), str(mine))
    assert table.returncode == 0 and "B / A" in table.stdout and kept_path.name in table.stdout


@pytest.mark.process
def test_compare_says_what_is_wrong_with_a_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"a": 1}))
    for args, says in (((str(tmp_path / "missing.json"), str(other)), "No such file"),
                       ((str(bad), str(other)), "not a JSON results file")):
        done = pan_bench("compare", *args)
        assert done.returncode != 0 and says in done.stderr and "Traceback" not in done.stderr, done.stderr
    unrelated = tmp_path / "unrelated.json"
    unrelated.write_text(json.dumps({"b": 2}))
    done = pan_bench("compare", str(other), str(unrelated))
    assert done.returncode == 1 and "share no figure" in done.stderr
