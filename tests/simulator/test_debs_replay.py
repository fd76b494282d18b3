"""The DEBS 2013 queries end to end: generated match -> Spark split -> `pan replay` of a workflow.

Checks the acceptance criteria of the queries: detection against the
generator's ground truth, identical outputs across runs and across peer
distributions, and no effect of sensor impairments. All slow: they run under
`make test` when CI=true (or PAN_SLOW=1).
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from pan.launch.lifeline import shared_lifeline
from pan.workflow.parser import on_free_ports
from simulator.recording import read_lines, recorded_files
from tests.conftest import ROOT
from workers.sparse_heatmap import PPM, dense

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]  # several full replays per test

PS = 10**12
KICK_TOLERANCE_PS = 10 * 10**9
SHOT_TOLERANCE_PS = 50 * 10**9


def pan(*args: str, timeout: float = 1800, log: Path | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pan", *args], cwd=ROOT, capture_output=True, timeout=timeout, check=False,
        **shared_lifeline().spawn_options(),  # a killed pytest leaves no replay behind
    )
    if log is not None:  # the workers' warnings (late rows, idle streams) explain a differing output
        log.write_bytes(done.stderr)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return done.stdout.decode()


def warnings_of(out: Path) -> list[str]:
    """The warnings and idle declarations the replay that recorded ``out`` logged (for failure messages)."""
    log = out.with_name(out.name + ".log")
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return [line for line in lines if "WARNING" in line or ": idle" in line][:20]


def relocated(workflow: str, tmp: Path, **overrides: Any) -> Path:
    """The shipped workflow on free ports (and with ``overrides`` in every ordered worker's params)."""
    data = on_free_ports(json.loads((ROOT / "workflows" / workflow).read_text()))
    for worker in data["workers"]:
        if overrides and "clock_mode" in worker.get("params", {}):
            worker["params"] = {**worker["params"], **overrides}
    path = tmp / f"{Path(workflow).stem}-{len(list(tmp.iterdir()))}.json"
    path.write_text(json.dumps(data))
    return path


def replay(workflow: Path, split: Path, out: Path, *extra: str) -> dict[str, Any]:
    log = out.with_name(out.name + ".log")
    report = json.loads(pan("replay", "--json", str(workflow), "--data", str(split), "--record", str(out), *extra,
                            log=log))
    assert report["missed"] == {}
    assert report["cpu_s"]["before_feed"] > 0 and report["cpu_s"]["until_recorded"] > 0
    assert report["recorder"]["pages"] >= report["recorder"]["requests"] >= 0
    return report


def streams(out: Path, *, skip_late: bool = True) -> dict[str, bytes]:
    return {p.stem: p.read_bytes() for p in sorted(out.glob("*.jsonl")) if not (skip_late and p.stem.endswith("_late"))}


def tuples(out: Path, stream: str) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in (out / f"{stream}.jsonl").read_bytes().splitlines()]


@pytest.fixture(scope="module")
def match(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 1-minute generated match (63 kicks, 1 shot), split per sensor with Spark."""
    root = tmp_path_factory.mktemp("debs")
    pan("generate", "--exact", "--minutes", "1", "--seed", "21", "--out", str(root / "game"))
    pan("split", str(root / "game" / "full-game"), "--out", str(root / "split"))
    return {"game": root / "game", "split": root / "split", "tmp": root}


@pytest.fixture(scope="module")
def baseline(match: dict[str, Path]) -> Path:
    out = match["tmp"] / "run-3-peers-1"
    replay(relocated("full_game_3_peers.json", match["tmp"]), match["split"], out)
    return out


def test_outputs_exist_and_nothing_was_late(baseline: Path) -> None:
    recorded = streams(baseline, skip_late=False)
    for stream in ("A1", "REFEREE", "ACTIVEBALL", "BALLHITS", "BP_A1", "BP_wholeGame_A", "RUN_B3",
                   "RUNAGG_1min_B3", "HM_wholeGame_64x100_A2", "SHOTS"):
        assert stream in recorded
    late = [name for name, data in recorded.items() if name.endswith("_late") and data]
    assert not late, (late, warnings_of(baseline))


def test_kicks_possession_shots_and_heat_maps_against_ground_truth(baseline: Path, match: dict[str, Path]) -> None:
    truth = match["game"] / "truth"
    kicks = [(int(r["ts"]), r["player"]) for r in csv.DictReader((truth / "kicks.csv").open())]
    hits = [(t["ts"], t["player"]) for t in tuples(baseline, "BALLHITS")]
    matched = sum(
        1 for ts, player in hits if any(p == player and abs(ts - k) <= KICK_TOLERANCE_PS for k, p in kicks)
    )
    assert matched / len(hits) >= 0.98 and matched / len(kicks) >= 0.98, (matched, len(hits), len(kicks))

    held: dict[str, int] = defaultdict(int)
    for row in csv.DictReader((truth / "possession.csv").open()):
        held[row["player"]] += int(row["end_ts"]) - int(row["start_ts"])
    for player, truth_ps in held.items():
        final = tuples(baseline, f"BP_{player}")[-1]["time_ps"]
        assert abs(final - truth_ps) <= 0.02 * truth_ps, (player, final, truth_ps)

    shots_truth = [(int(r["ts_start"]), r["player"]) for r in csv.DictReader((truth / "shots.csv").open())]
    shot_starts: dict[int, tuple[int, str]] = {}
    for t in tuples(baseline, "SHOTS"):
        shot_starts.setdefault(t["shot"], (t["ts"], t["player"]))
    detected = list(shot_starts.values())

    def same_shot(a: tuple[int, str], b: tuple[int, str]) -> bool:
        return a[1] == b[1] and abs(a[0] - b[0]) <= SHOT_TOLERANCE_PS

    recalled = sum(1 for s in shots_truth if any(same_shot(d, s) for d in detected))
    false_positives = [d for d in detected if not any(same_shot(d, s) for s in shots_truth)]
    assert recalled >= 0.95 * len(shots_truth) and not false_positives, (recalled, shots_truth, false_positives)

    for name in ("HM_wholeGame_64x100_A2", "HM_1min_8x13_B5", "HM_10min_32x50_A7"):
        heats = tuples(baseline, name)
        assert heats, name
        for heat in heats:  # every map sent has time counted (only a sliding window that empties sends none)
            cells = dense(heat)
            assert not heat["ppm"] or abs(int(cells.sum()) - PPM) <= np.count_nonzero(cells) / 2, (name, heat["i"])


@pytest.mark.heavy  # three more full replays, on 3, 6 and 14 peers
def test_identical_outputs_on_every_run_and_distribution(baseline: Path, match: dict[str, Path]) -> None:
    reference = streams(baseline)
    for n, workflow in enumerate(("full_game_3_peers.json", "full_game_6_peers.json", "full_game_14_peers.json")):
        out = match["tmp"] / f"run-{n}"
        replay(relocated(workflow, match["tmp"]), match["split"], out)
        again = streams(out)
        assert again.keys() == reference.keys()
        different = [name for name in reference if again[name] != reference[name]]
        assert not different, (workflow, different[:5], warnings_of(out), warnings_of(baseline))


def test_impairments_change_nothing(baseline: Path, match: dict[str, Path]) -> None:
    """Jitter up to 100 ms and 10-row packets: the ordering units restore the exact order."""
    out = match["tmp"] / "impaired"
    workflow = relocated("full_game_3_peers.json", match["tmp"], min_k=300 * 10**9)
    replay(workflow, match["split"], out, "--impair", str(ROOT / "workflows" / "impair_jitter.json"))
    reference, impaired = streams(baseline), streams(out)
    # The forwarders republish sensor rows in arrival order, which impairments shuffle on purpose;
    # every query output must come out the same.
    derived = [name for name in reference if not name.startswith("SENSOR") and name != "INTERRUPTIONS"]
    assert len(derived) > 300
    different = [name for name in derived if impaired.get(name) != reference[name]]
    assert not different, (different[:5], warnings_of(out), warnings_of(baseline))
    assert all(not data for name, data in streams(out, skip_late=False).items() if name.endswith("_late"))


def test_a_decoding_recorder_records_the_same_bytes(baseline: Path, match: dict[str, Path]) -> None:
    """The recorder writes line pages' bytes as they come; decoding every tuple and encoding it again (as it did
    before line pages) must give the same files, byte for byte, late side outputs and forwarded sensors included.
    This one also writes them compressed (--compress): the lines read back are the same bytes."""
    out = match["tmp"] / "decoded"
    report = replay(relocated("full_game_3_peers.json", match["tmp"]), match["split"], out, "--record-decoded",
                    "--compress")
    reference = streams(baseline, skip_late=False)
    files = recorded_files(out)
    assert all(path.name.endswith(".jsonl.zst") for path in files.values())
    decoded = {name: b"".join(line + b"\n" for line in read_lines(path)) for name, path in sorted(files.items())}
    assert decoded.keys() == reference.keys() and sum(map(len, reference.values())) > 10**6
    assert report["json_bytes"] == {name: len(data) for name, data in reference.items()}
    assert sum(path.stat().st_size for path in files.values()) < sum(report["json_bytes"].values()) / 2
    different = [name for name in reference if decoded[name] != reference[name]]
    assert not different, (different[:5], warnings_of(out), warnings_of(baseline))
