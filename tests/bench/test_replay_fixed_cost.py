"""`pan bench replay` measures what a replay costs without a row, to tell the rows' CPU from start-up's."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import query_delay, replay_measure
from tests.conftest import ROOT

pytestmark = [pytest.mark.process, pytest.mark.slow, pytest.mark.timeout(900)]


def test_a_replay_without_rows_starts_subscribes_ends_and_stops(tmp_path: Path) -> None:
    from simulator.match import generate

    generate(tmp_path / "game", 2 / 60, seed=2013)
    data = query_delay.plain_split(tmp_path / "game", tmp_path / "split")
    workflow = query_delay.on_free_ports_copy(ROOT / "workflows" / "full_game_3_peers.json", tmp_path)
    fixed = replay_measure.fixed_cost(workflow, data, tmp_path / "runs", "json", reps=1)
    assert fixed["runs"] == 1
    total, driver = fixed["cpu_total_s"]["median"], fixed["driver_cpu_s"]["median"]
    assert 0 < driver < total  # every process of the replay was measured, the driver among them
    summary = {"cpu_total_s_median": total + 4.0, "driver_cpu_s": {"median": driver + 1.0}}
    per_row = replay_measure.per_row_cpu(summary, fixed)
    assert per_row == {"cpu_total_s": 4.0, "driver_cpu_s": 1.0, "driver_share": 0.25}
