"""The demo's last lines say whether every query answered (issue 18, item 4)."""

from __future__ import annotations

import json
from pathlib import Path

from workers.demo_cli import queries_line


def record(folder: Path, streams: dict[str, list[dict]]) -> Path:
    folder.mkdir()
    for name, tuples in streams.items():
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tuples))
    return folder


def test_every_query_answered_with_counts_and_sprinters(tmp_path: Path) -> None:
    out = record(tmp_path / "all", {
        "RUN_A1": [{"intensity": "trot"}, {"intensity": "sprint"}], "RUN_B2": [{"intensity": "low"}],
        "RUNAGG_1min_A1": [{}], "BP_wholeGame_A": [{}, {}], "BALLHITS": [{}], "HM_1min_8x13_A1": [{}],
        "SHOTS": [{}, {}, {}], "SHOTS_late": [{}],
    })
    assert queries_line(out) == ("every query answered: running (Q1) 4, possession (Q2) 2, ball hits (Q2) 1, "
                                 "heat maps (Q3) 1, shots (Q4) 3; sprints by 1 player(s)")


def test_a_silent_query_is_named(tmp_path: Path) -> None:
    out = record(tmp_path / "some", {"RUN_A1": [{"intensity": "trot"}], "BP_wholeGame_A": [{}], "SHOTS": [],
                                      "SHOTS_late": [{}]})
    line = queries_line(out)
    assert line.startswith("queries: no output from ball hits (Q2), heat maps (Q3), shots (Q4) ")
    assert line.endswith("answered: running (Q1) 1, possession (Q2) 1; no sprint")


def test_the_demo_records_the_query_answers_not_the_sensor_rate_streams() -> None:
    from pan.workflow.parser import load_workflow
    from simulator.replay import output_streams
    from workers.demo_cli import DEFAULT_WORKFLOW, recorded_streams

    every = output_streams(load_workflow(DEFAULT_WORKFLOW))
    kept = recorded_streams(every)
    left_out = set(every) - set(kept)
    assert {"SHOTS", "BALLHITS", "BP_wholeGame_A", "HM_wholeGame_64x100_A2", "RUN_B8", "RUNAGG_1min_A1"} <= set(kept)
    assert {"SENSOR105", "A1", "REFEREE", "ACTIVEBALL", "INTERRUPTIONS"} <= left_out
    assert not [s for s in kept if s.startswith(("SENSOR", "ACTIVEBALL", "INTERRUPTIONS"))]
    answers = [s for s in kept if not s.endswith("_late")]
    possession = [s for s in answers if s.startswith("BP_")]
    assert len(answers) == 16 * 6 + 16 * 16 + len(possession) + 2 and len(possession) == 16 + 5 * 2
