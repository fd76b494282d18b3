"""Smoke tests of `pan bench fanout|redis|network` in their quickest modes: structure, not numbers."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from benchmarks import common, network

ROOT = Path(__file__).resolve().parents[1]


def bench(*args: str, timeout: float = 120) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "pan", "bench", *args], cwd=ROOT, capture_output=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    return orjson.loads(result.stdout)


POINT_KEYS = {"clients", "delivered_per_s", "p50_ms", "p99_ms", "client_p99_worst_ms", "server_cpu", "client_cpu",
              "demand_fraction", "missed"}


def test_bench_group_lists_its_benchmarks() -> None:
    out = subprocess.run([sys.executable, "-m", "pan", "bench", "--help"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    for name in ("fanout", "redis", "network"):
        assert name in out


def test_fanout_quick_writes_its_section(tmp_path: Path) -> None:
    report = tmp_path / "benchmarks.md"
    report.write_text("# Benchmarks\n\n<!-- other:start -->\nkept\n<!-- other:end -->\n")
    summary = bench("fanout", "--quick", "--write", str(report))
    assert summary["benchmark"] == "fanout" and summary["machine"]["cores"] >= 1
    [point] = summary["points"]
    assert set(point) >= POINT_KEYS and point["publishers"] == 1 and point["clients"] == 4
    assert point["delivered_per_s"] > 0 and not point["crashed"]
    text = report.read_text()
    assert "kept" in text and "<!-- fanout-bench:start -->" in text and "<!-- fanout-bench:end -->" in text
    assert (tmp_path / "img" / "fanout-bench_delivered.png").stat().st_size > 1000


def test_redis_quick_compares_in_one_run() -> None:
    summary = bench("redis", "--quick", timeout=300)
    if "skipped" in summary:
        pytest.skip(summary["skipped"])
    [point] = summary["points"]
    assert set(point["redis"]) >= POINT_KEYS and set(point["pan1"]) >= POINT_KEYS
    assert set(point["ratio_pan1"]) == {"delivered", "p99", "delivered_target_met"}
    assert point["redis"]["delivered_per_s"] > 0 and point["pan1"]["delivered_per_s"] > 0


def test_network_says_why_it_cannot_run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(network, "can_run", lambda: "needs root (test)")
    parser = argparse.ArgumentParser()
    network.add_arguments(parser)
    assert network.run(parser.parse_args(["--quick"])) == 0
    out = capsys.readouterr()
    assert orjson.loads(out.out) == {"benchmark": "network", "skipped": "needs root (test)"}
    assert "skipped: needs root (test)" in out.err


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_network_quick_in_namespaces() -> None:
    summary = bench("network", "--quick", timeout=300)
    if "skipped" in summary:
        pytest.skip(summary["skipped"])
    assert [phase["latency_ms"] for phase in summary["phases"]] == [0, 20]
    for phase in summary["phases"]:
        assert set(phase["paths"]) == set(network.PATHS)
        assert all(d["count"] > 0 and d["p50_ms"] is not None for d in phase["paths"].values())
    assert set(summary["fit"]) == set(network.PATHS)


def test_write_section_replaces_only_its_own(tmp_path: Path) -> None:
    path = tmp_path / "b.md"
    common.write_section(path, "a", "one")
    common.write_section(path, "b", "two")
    common.write_section(path, "a", "three")
    text = path.read_text()
    assert "three" in text and "two" in text and "one" not in text
    assert text.index("three") < text.index("two")
