"""Acceptance of issue 18, item 3: a replay that cannot keep up waits instead of losing output.

Every worker of the 3-peer full game gets a small ring (``buffer_size``), so a feed at 20x real time runs far
ahead of what the workflow (and the recorder) can drain on this machine. The default (lossless) replay must
still record every output whole: nothing reported missed, and every recorded stream holds each index from 0
on, once. It must say how fast it went. Nothing here depends on how fast the machine is: a fast one simply
never stalls. (A paced replay is not compared with an unpaced one: at 20x on a busy machine rows of
different sensors can arrive late for their ordering units, and late events are routed, not lost.)
Heat maps are kept for two players only: a 64x100 map is 25 kB of JSON, and recording all 256 of them would
make the test minutes longer without testing more.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.query_delay import plain_split
from pan.launch.lifeline import shared_lifeline
from pan.workflow.parser import on_free_ports
from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

SMALL_RING = 500  # tuples per output: a second of one ball sensor at 20x is 40,000


def replay(workflow: Path, data: Path, out: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    done = subprocess.run(
        [sys.executable, "-m", "pan", "replay", str(workflow), "--data", str(data), "--record", str(out),
         "--skip-halftime", "--json", *extra], cwd=ROOT, capture_output=True, timeout=1500, check=False,
        **shared_lifeline().spawn_options(),  # a killed pytest leaves no replay behind
    )
    return done.returncode, json.loads(done.stdout or b"{}"), done.stderr.decode(errors="replace")[-3000:]


def outputs(record: Path) -> dict[str, bytes]:
    return {p.stem: p.read_bytes() for p in sorted(record.glob("*.jsonl"))}


def test_a_fast_replay_into_small_rings_waits_and_loses_nothing(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pan", "generate", "--minutes", "0.3", "--seed", "11", "--out",
                    str(tmp_path / "game")], cwd=ROOT, check=True, capture_output=True, timeout=300)
    data = plain_split(tmp_path / "game", tmp_path / "split")
    workflow = on_free_ports(json.loads((ROOT / "workflows" / "full_game_3_peers.json").read_text()))
    workflow["workers"] = [w for w in workflow["workers"] if w["name"] != "Heat maps team B"]
    for worker in workflow["workers"]:
        worker["buffer_size"] = SMALL_RING
        if worker["type"] == "heatmap":
            worker["params"]["players"] = ["A1", "A2"]
    path = tmp_path / "small-rings.json"
    path.write_text(json.dumps(workflow))

    code, fast, log = replay(path, data, tmp_path / "fast", "--speedup", "20")
    assert code == 0 and fast["missed"] == {}, log
    assert json.loads((tmp_path / "fast" / "workflow.json").read_text())["delivery"] == "lossless"
    assert fast["speedup"] == 20 and fast["achieved_speedup"] > 0 and fast["feed_speedup"] > 0
    assert set(fast["held"]) >= {"stalls", "longest_stall_s", "stalled_s"}
    assert fast["held"]["longest_stall_s"] <= fast["held"]["stalled_s"]

    recorded = outputs(tmp_path / "fast")
    assert recorded["BALLHITS"] and recorded["BP_wholeGame_A"] and recorded["HM_1min_64x100_A1"]
    broken = {}
    for name, body in recorded.items():
        indices = [json.loads(line)["i"] for line in body.splitlines()]
        if indices != list(range(len(indices))):
            broken[name] = next(k for k, i in enumerate(indices) if i != k)
    assert not broken, f"streams whose indices are not 0, 1, 2, ... (first wrong position): {broken}"
    assert sum(fast["streams"].values()) == sum(len(body.splitlines()) for body in recorded.values())
