"""Acceptance of issue 17: speculation changes when a result comes, never what it is.

The first half (15 s of play) of a generated match is replayed through the full-game workflow (3 and 14
peers) with ``workflows/impair_outages.json``: jitter, reordering inside packets, packet loss and drop
outages of the balls. Three runs per workflow, every stream recorded in its settled view:

- buffering units, impaired;
- speculative units (``"ordering": {"mode": "speculative", "alpha": 1/3}`` on every ordered worker,
  inputs read raw, so retractions travel between levels), impaired; on 3 peers also alpha 0, which
  speculates on everything and so surely replays;
- buffering units, without impairments, of exactly the rows the impaired runs sent (their send log).

Every derived stream must be byte for byte the same in all runs (the forwarders republish sensor rows
in arrival order, which the impairments shuffle on purpose; see ``tests/bench/test_ordering_modes.py``).
The speculative runs must really have speculated: events emitted early (and replays, at alpha 0).

Watermark mode with a K floor above the profile's disorder (as in test_ordering_modes), so no event is
late in any run: late events are the one thing on which ordering modes may legitimately differ.
"""

from __future__ import annotations

import asyncio
import csv
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from benchmarks import ordering_modes_replay
from benchmarks.speculation import with_ordering
from tests.bench.test_ordering_modes import MIN_K_PS, first_half_match, outputs, sent_rows_only, span
from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

ALPHA_THIRD = float(Fraction(1, 3))
PARAMS = {"clock_mode": "watermark", "min_k": MIN_K_PS}


@pytest.fixture(scope="module")
def match(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The first half (15 s of play) of a generated match."""
    return first_half_match(tmp_path_factory, "speculative", 0.5, 17)


def sent(send_log: Path) -> set[tuple[str, int]]:
    with send_log.open() as fh:
        return {(row["stream"], int(row["ts"])) for row in csv.DictReader(fh)}


def final_counters(run: ordering_modes_replay.Run) -> dict[str, dict[str, Any]]:
    return {unit: run.final(unit) for unit in run.samples}


def compare_runs(workflow: Path, match: dict[str, Path], alphas: tuple[float, ...]) -> None:
    """Buffering and speculative (each of ``alphas``) impaired, and buffering unimpaired: equal derived outputs.

    With alpha 0 every event goes to the component as soon as clk reaches it, so the disorder must make it
    replay and retract; at alpha 1/3 (K/3 of slack) a replay needs a row more than K/3 behind its stream.
    """
    tmp = match["tmp"] / workflow.stem
    tmp.mkdir()
    runs = {}
    configurations = [("buffering", None)] + [
        (f"speculative-{alpha:.2f}", {"mode": "speculative", "alpha": alpha}) for alpha in alphas]
    for name, ordering in configurations:
        runs[name] = asyncio.run(ordering_modes_replay.replay_sampled(
            with_ordering(workflow, tmp, ordering, PARAMS), match["split"], tmp / name, mode="watermark",
            speedup=0, send_log=tmp / f"{name}-sent.csv", record_all=True))
        # Same profile, same seeds: every impaired run lost the same rows.
        assert sent(tmp / f"{name}-sent.csv") == sent(tmp / "buffering-sent.csv")
    same_rows = sent_rows_only(match["split"], tmp / "buffering-sent.csv", tmp / "sent-split")
    assert span(same_rows) == span(match["split"])  # same origin and heartbeats as the impaired runs
    runs["unimpaired"] = asyncio.run(ordering_modes_replay.replay_sampled(
        with_ordering(workflow, tmp, None, PARAMS), same_rows, tmp / "unimpaired", mode="watermark", impair=None,
        speedup=0, record_all=True))

    for name, run in runs.items():
        late = {unit: c["late"] for unit, c in final_counters(run).items() if c["late"]}
        assert not late, f"{name}: late events {late}"
        assert not run.missed, f"{name}: {run.missed}"
    assert not any(c["premature"] for c in final_counters(runs["buffering"]).values())
    for name, _ in configurations[1:]:
        speculated = final_counters(runs[name])
        assert sum(c["premature"] for c in speculated.values()) > 0, (name, speculated)
        if name == "speculative-0.00":
            assert sum(c["replays"] for c in speculated.values()) > 0, speculated  # the disorder made it replay

    reference = outputs(tmp / "unimpaired")
    derived = [name for name in reference if not name.startswith("SENSOR") and name != "INTERRUPTIONS"]
    assert len(derived) > 300 and reference["BALLHITS"] and reference["BP_wholeGame_A"]
    for name, _ in configurations:
        got = outputs(tmp / name)
        different = [stream for stream in derived if got.get(stream) != reference[stream]]
        assert not different, f"{name} differs from the unimpaired run in {len(different)}: {different[:10]}"


@pytest.mark.heavy
def test_speculative_and_buffering_settle_alike_on_3_peers(match: dict[str, Path]) -> None:
    compare_runs(ROOT / "workflows" / "full_game_3_peers.json", match, (ALPHA_THIRD, 0.0))


@pytest.mark.heavy
def test_speculative_and_buffering_settle_alike_on_14_peers(match: dict[str, Path]) -> None:
    compare_runs(ROOT / "workflows" / "full_game_14_peers.json", match, (ALPHA_THIRD,))
