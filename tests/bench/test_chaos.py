"""Fault-injection suite (issue 10, build item 12): `pan bench chaos` and its pieces.

Quick: the seeded fault schedule, the chaos workflow and the comparison that
counts lost, duplicated and unreported tuples. Slow: three seeds of faults
(pause, kill-and-restart, dropped connections) during a replay of a short
generated match, checked against an undisturbed run of the same data.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from benchmarks.chaos_cluster import HEALTH_GIVE_UP_S
from benchmarks.chaos_compare import compare, totals
from benchmarks.chaos_faults import drop_supported
from benchmarks.chaos_recorder import CONSUMER
from benchmarks.chaos_schedule import (
    FAULT_KINDS,
    FIRST_FAULT_S,
    OTHER_PAUSE_S,
    PRODUCER_PAUSE_S,
    RESTART_DOWN_S,
    STALL_S,
    make_schedule,
)
from benchmarks.chaos_workflow import (
    COVERING_BUFFER,
    DEFAULT_REPEATED,
    REPEATER_PEERS,
    TIGHT_BUFFER,
    TIGHT_WORKERS,
    chaos_workflow,
)
from benchmarks.query_delay import plain_split
from tests.conftest import ROOT

WORKFLOW = ROOT / "workflows" / "full_game_3_peers.json"
TARGETS = {"pause": ["repository", "peer1", "rep1"], "restart": ["repository", "rep1"], "drop": ["peer1"],
           "stall": [CONSUMER]}


# --- the schedule ----------------------------------------------------------------------------


def test_schedule_is_the_same_for_the_same_seed_and_differs_between_seeds() -> None:
    first = make_schedule(7, TARGETS, 40.0, 6, frozenset({"peer1"}))
    assert first == make_schedule(7, TARGETS, 40.0, 6, frozenset({"peer1"}))
    assert first != make_schedule(8, TARGETS, 40.0, 6, frozenset({"peer1"}))


def test_schedule_covers_every_kind_within_the_window_with_short_producer_pauses() -> None:
    for seed in range(20):
        faults = make_schedule(seed, TARGETS, 30.0, 6, frozenset({"peer1"}))
        assert len(faults) == 6
        assert {f.kind for f in faults} == set(FAULT_KINDS)
        assert [f.at_s for f in faults] == sorted(f.at_s for f in faults)
        assert all(FIRST_FAULT_S <= f.at_s <= 30.0 for f in faults)
        for fault in faults:
            assert fault.target in TARGETS[fault.kind]
            if fault.kind == "pause":
                low, high = PRODUCER_PAUSE_S if fault.target == "peer1" else OTHER_PAUSE_S
                assert low <= fault.duration_s <= high
            elif fault.kind == "restart":
                assert RESTART_DOWN_S[0] <= fault.duration_s <= RESTART_DOWN_S[1]
            elif fault.kind == "stall":
                assert STALL_S[0] <= fault.duration_s <= STALL_S[1]
            else:
                assert fault.duration_s == 0


def test_schedule_leaves_out_kinds_without_targets() -> None:
    faults = make_schedule(1, {**TARGETS, "drop": []}, 30.0, 4)
    assert {f.kind for f in faults} == {"pause", "restart", "stall"}
    assert make_schedule(1, {}, 30.0, 4) == []


# --- the workflow ----------------------------------------------------------------------------


def test_chaos_workflow_adds_level_1_repeaters_of_leaf_streams_on_their_own_peers(tmp_path: Path) -> None:
    from pan.workflow.parser import load_workflow

    workflow = load_workflow(chaos_workflow(WORKFLOW, tmp_path / "chaos.json"))
    peers = workflow.peers()
    assert set(REPEATER_PEERS) <= set(peers)
    for peer in REPEATER_PEERS:
        [repeater] = peers[peer]
        assert repeater.type == "repeater" and repeater.params["level"] == 1
        assert repeater.inputs == list(DEFAULT_REPEATED)
    running = next(w for w in workflow.workers if w.name == "Running team A")
    assert running.buffer_size >= COVERING_BUFFER  # producers of repeated streams hold the whole match
    [tight] = [w for w in workflow.workers if w.name in TIGHT_WORKERS]
    assert tight.buffer_size == TIGHT_BUFFER
    original = load_workflow(WORKFLOW)
    assert workflow.repository.port != original.repository.port  # moved to free ports


def test_chaos_workflow_refuses_streams_a_worker_consumes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="leaves"):
        chaos_workflow(WORKFLOW, tmp_path / "chaos.json", ("ACTIVEBALL",))
    with pytest.raises(ValueError, match="no producer"):
        chaos_workflow(WORKFLOW, tmp_path / "chaos.json", ("NOPE",))
    with pytest.raises(ValueError, match="tight"):
        chaos_workflow(WORKFLOW, tmp_path / "chaos.json", tight=("Active ball",))  # feeds Ball hits


# --- the comparison --------------------------------------------------------------------------


def write_stream(folder: Path, name: str, indices: list[int], value: int = 0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [orjson.dumps({"i": i, "v": i * 10 + (value if i == 3 else 0)}) for i in indices]
    (folder / f"{name}.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))


def recorded(**streams: dict[str, Any]) -> dict[str, Any]:
    base = {"reported_missed": 0, "reported_ranges": [], "resets": 0, "via_repeater": 0}
    return {"streams": {name: {**base, **state} for name, state in streams.items()}}


def test_compare_counts_lost_duplicated_changed_and_unreported(tmp_path: Path) -> None:
    ref, run = tmp_path / "ref", tmp_path / "run"
    for name in ("same", "gap", "silent", "dup", "changed"):
        write_stream(ref, name, list(range(10)))
    write_stream(run, "same", list(range(10)))
    write_stream(run, "gap", [0, 1, 2, 6, 7, 8, 9])  # 3..5 lost and reported
    write_stream(run, "silent", [0, 1, 2, 3, 4, 5, 6, 7])  # 8, 9 lost, nothing reported
    write_stream(run, "dup", [0, 1, 2, 3, 4, 4, 5, 6, 7, 8, 9])
    write_stream(run, "changed", list(range(10)), value=1)
    rows = compare(ref, run, recorded(same={}, gap={"reported_missed": 3, "reported_ranges": [[3, 5]]},
                                            silent={}, dup={}, changed={}))
    assert rows["same"]["identical"] == 1 and rows["same"]["lost"] == 0
    assert (rows["gap"]["lost"], rows["gap"]["reported"], rows["gap"]["unreported"]) == (3, 3, 0)
    assert (rows["silent"]["lost"], rows["silent"]["unreported"]) == (2, 2)
    assert rows["dup"]["duplicated"] == 1 and rows["dup"]["lost"] == 0
    assert rows["changed"]["changed"] == 1 and rows["changed"]["identical"] == 0
    total = totals(rows)
    assert (total["streams"], total["identical"], total["lost"], total["unreported"]) == (5, 1, 5, 2)


# --- the suite -------------------------------------------------------------------------------


@pytest.mark.heavy
@pytest.mark.timeout(900)
def test_three_seeds_of_faults_no_hang_no_unreported_loss_no_duplicate(tmp_path: Path) -> None:
    """3 seeds x 4 faults (every kind once per seed) during a 30 s match fed in real time."""
    from simulator.match import generate

    generate(tmp_path / "game", 0.5, seed=2013)
    data = plain_split(tmp_path / "game", tmp_path / "split")
    report = tmp_path / "benchmarks.md"
    done = subprocess.run(
        [sys.executable, "-m", "pan", "bench", "chaos", "--data", str(data), "--seeds", "1,2,3", "--faults", "4",
         "--keep", str(tmp_path / "work"), "--write", str(report),
         # Answering at all after each fault is this test's check; how fast (2 s) is the benchmark's figure,
         # since on a loaded machine /health took up to 6 s with no fault at all.
         "--health-bound", str(HEALTH_GIVE_UP_S)],
        cwd=ROOT, capture_output=True, timeout=840, check=False,
    )
    assert done.stdout, done.stderr.decode()[-3000:]
    results = json.loads(done.stdout)
    assert results["reference"]["missed"] == 0 and results["reference"]["tuples"] > 100_000
    kinds = set(FAULT_KINDS) if drop_supported() else set(FAULT_KINDS) - {"drop"}
    for seed in results["seeds"]:
        assert seed["checks"] and all(seed["checks"].values()), (seed["seed"], seed["checks"], seed["streams"])
        assert {f["kind"] for f in seed["faults"]} == kinds
        for fault in seed["faults"]:  # every process measured after every fault, and every one answered
            assert set(fault["health_s"]) == {"repository", "peer1", "peer2", "peer3", *REPEATER_PEERS}
            assert all(v is not None for v in fault["health_s"].values()), fault
        assert seed["totals"]["streams_via_repeater"] > 0  # some recorders did pull through the repeaters
    # the stalls lost tuples of the tight streams, and every one of them was reported
    assert sum(seed["totals"]["lost"] for seed in results["seeds"]) > 0
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    text = report.read_text()
    assert "<!-- chaos:start -->" in text and "](img/chaos.png)" in text
    assert (tmp_path / "img" / "chaos.png").read_bytes().startswith(b"\x89PNG")
