"""The default `pan demo` (a 2-minute match) records what a person looks at: at most 300 MB, every query answering
(issue 41's acceptance; it was 4.6 GB before compact heat maps and change-only emission)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pan.launch.lifeline import shared_lifeline

DEMO_BYTES_MAX = 300 * 10**6


@pytest.mark.heavy
@pytest.mark.timeout(1800)
def test_the_default_demo_records_at_most_300_mb_and_every_query_answers(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pan", "demo", "--out", "demo-out"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=1500, **shared_lifeline().spawn_options())
    assert done.returncode == 0, done.stderr[-3000:]
    assert "every query answered: running (Q1)" in done.stdout, done.stdout[-3000:]
    streams = tmp_path / "demo-out" / "streams"
    recorded = sum(path.stat().st_size for path in streams.glob("*.jsonl*"))
    heat_maps = [p for p in streams.glob("HM_*") if "_late" not in p.name]
    assert len(heat_maps) == 16 * 16  # every heat-map stream is there, none left out for size
    assert 10**6 < recorded <= DEMO_BYTES_MAX, f"the demo recorded {recorded / 1e6:.0f} MB"
