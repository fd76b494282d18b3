"""Q1 running analysis: the array path writes what the per-event path writes, byte for byte, index for index."""

from __future__ import annotations

from typing import Any

import pytest

from pan.components.testing import build_component
from pan.config.specs import WorkflowError
from tests.support.match_feed import OFFLINE, load_match, merged, player_stream_of
from tests.workers.paths import Twins
from tests.workers.test_heatmap_paths import walk
from workers.debs import FIRST_HALF, PS_PER_MS, PS_PER_S, SECOND_HALF

S1, E1 = FIRST_HALF
S2, E2 = SECOND_HALF


def twins(**params: Any) -> Twins:
    return Twins("running", {**OFFLINE, **params}, buffer_size=50_000)


def test_empty_and_one_event_batches() -> None:
    pair = twins(players=["A2", "B3"])
    pair.process([])
    for ev in walk(1, ["A2", "B3"], S1 - PS_PER_S, 12):
        pair.process([ev])
        pair.process([])
    assert pair.compared >= 2 * 5 * 50 * 10


def test_batches_spanning_both_half_ends_and_the_break() -> None:
    pair = twins(players=["A5", "B2"], agg_period_ms=100)
    samples = walk(2, ["A5", "B2"], E1 - 70 * PS_PER_S, 75) + walk(3, ["A5", "B2"], S2 - PS_PER_S, 65)
    samples += walk(4, ["A5", "B2"], E2 - 3 * PS_PER_S, 6)
    for start in range(0, len(samples), 997):
        pair.process(samples[start:start + 997])
    assert pair.compared >= 2 * (135 * 50 + 4 * 135 * 10)


def test_gaps_longer_than_a_second_lost_samples_and_fast_steps() -> None:
    samples = walk(5, ["B1", "B2"], S1, 100, skip=0.3)
    gapped = [s for s in samples if not (20 * PS_PER_S <= s["ts"] - S1 < 23 * PS_PER_S and s["player"] == "B1")
              and not (40 * PS_PER_S <= s["ts"] - S1 < 41 * PS_PER_S + 7 * PS_PER_MS)]
    for n, s in enumerate(gapped):  # every band: steps of 0 to 1.6 m per 20 ms
        s["x"] = 1000.0 + (n % 80) * 20.0 * (n % 7)
    pair = twins(players=["B1", "B2"], windows=["1min", "wholeGame"])
    for start in range(0, len(gapped), 333):
        pair.process(gapped[start:start + 333])
    intensities = {t["intensity"] for t in pair.per_event.ctx.outputs["RUN_B2"].buffer.read(-1).items
                   for t in [__import__("orjson").loads(t)]}
    assert pair.per_event.counters()["gaps"] >= 3 and len(intensities) == 6 and pair.compared >= 2 * 3 * 3000


def test_the_arrays_param_is_a_bool() -> None:
    with pytest.raises(WorkflowError, match="arrays"):
        build_component("running", {"arrays": "no"})


@pytest.fixture(scope="module")
def match(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return load_match(tmp_path_factory)


@pytest.mark.process
def test_generated_match_tuple_for_tuple(match: dict[str, Any]) -> None:
    players = ["A1", "A3", "A6", "B2", "B5", "B8"]
    samples = merged(match["player_streams"], players)
    pair = twins(players=players)
    i, n = 0, len(samples)
    while i < n:  # 200 ms of event time per batch, one feed per player stream, as the ordering unit gets them
        end = samples[i]["ts"] + PS_PER_S // 5
        batches: dict[str, list[dict[str, Any]]] = {}
        while i < n and samples[i]["ts"] < end:
            batches.setdefault(player_stream_of(samples[i]), []).append(samples[i])
            i += 1
        for stream, batch in batches.items():
            pair.feed(stream, batch)
    pair.finish()
    counted = sum(1 for s in samples if s["ts"] > S1)
    assert pair.compared >= 5 * (counted - len(players))
