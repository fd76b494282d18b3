"""Player averages: the array path writes what the per-event path writes, byte for byte, index for index."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pan.components.testing import build_component
from pan.config.specs import WorkflowError
from tests.support.match_feed import OFFLINE, as_events, load_match, player_rows, sensor_stream_of
from tests.workers.paths import Twins
from workers.debs import FIRST_HALF, PS_PER_S, SECOND_HALF

S1, E1 = FIRST_HALF
S2, _E2 = SECOND_HALF


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    """The sensor rows of players and referee of a generated match, in ts order."""
    return player_rows(load_match(tmp_path_factory)["folder"] / "full-game")


def twins(**params: Any) -> Twins:
    return Twins("player_average", {**OFFLINE, **params}, buffer_size=200_000)


def first_seconds(rows: np.ndarray, seconds: float, shift_to: int | None = None) -> list[dict[str, Any]]:
    """The rows of the match's first ``seconds``; moved in time so that they start at ``shift_to``."""
    start = int(rows[0, 1])
    part = rows[rows[:, 1] < start + int(seconds * PS_PER_S)].copy()
    if shift_to is not None:
        part[:, 1] += shift_to - start
    return as_events(part)


pytestmark = pytest.mark.process  # the rows come from a generated match


def test_empty_and_one_event_batches(rows: np.ndarray) -> None:
    pair = twins(players=["A1", "B4", "REFEREE"])
    pair.process([])
    for ev in first_seconds(rows, 3):
        pair.process([ev])
        pair.process([])
    assert pair.compared > 100 and pair.arrays.rows_on_arrays > 1000


def test_a_batch_spanning_the_half_time_break_and_silent_sensors(rows: np.ndarray) -> None:
    """Every sensor falls silent for the break (far more than the 1 s a latest row counts for)."""
    pair = twins()
    batch = first_seconds(rows, 6, E1 - 5 * PS_PER_S) + first_seconds(rows, 6, S2 - PS_PER_S // 3)
    pair.process(batch)
    pair.process(first_seconds(rows, 2, S2 + 6 * PS_PER_S))  # a gap of a second or so
    assert pair.compared > 16 * 500


def test_bad_foreign_stale_and_float_rows(rows: np.ndarray) -> None:
    events = first_seconds(rows, 4)
    events[10]["v"] = -1  # bad
    events[20]["sid"] = 9999  # foreign
    events[30] = {**events[25], "ts": events[25]["ts"] - 10**9}  # behind its sensor: stale
    floats = [{**e, "x": e["x"] + 0.25} for e in first_seconds(rows, 1, int(rows[0, 1]) + 4 * PS_PER_S)]
    pair = twins()
    for start in range(0, len(events), 700):
        pair.process(events[start:start + 700])
    pair.process(floats)  # not all ints: this batch goes event by event on both paths
    pair.process([{"sid": 13}, *first_seconds(rows, 1, int(rows[0, 1]) + 5 * PS_PER_S)])
    counters = pair.arrays.counters()
    assert {k: counters[k] for k in ("bad", "foreign", "stale")} == {
        k: pair.per_event.counters()[k] for k in ("bad", "foreign", "stale")}
    assert counters["bad"] == 2 and counters["foreign"] == 1 and counters["stale"] == 1
    assert pair.compared > 16 * 200


def test_the_arrays_param_is_a_bool() -> None:
    with pytest.raises(WorkflowError, match="arrays"):
        build_component("player_average", {"arrays": 0})


def test_generated_match_tuple_for_tuple(rows: np.ndarray) -> None:
    pair = twins()
    events = as_events(rows)
    i, n = 0, len(events)
    while i < n:  # a second of event time per batch, one feed per sensor stream, as the ordering unit gets them
        end = events[i]["ts"] + PS_PER_S
        batches: dict[str, list[dict[str, Any]]] = {}
        while i < n and events[i]["ts"] < end:
            batches.setdefault(sensor_stream_of(events[i]), []).append(events[i])
            i += 1
        for stream, batch in batches.items():
            pair.feed(stream, batch)
    pair.finish()
    seconds = (events[-1]["ts"] - events[0]["ts"]) / PS_PER_S
    assert pair.compared > 17 * 50 * (seconds - 1) and pair.arrays.rows_on_arrays == n


def test_a_sensor_silent_exactly_a_second_still_counts(rows: np.ndarray) -> None:
    """A sensor whose latest row is exactly 1 s older than a boundary counts there, and not at the next."""
    from workers.debs import PLAYER_SENSORS
    from workers.players import SLOT_PS

    first, second = PLAYER_SENSORS["A1"][:2]
    events = [e for e in first_seconds(rows, 3) if e["sid"] in (first, second)]
    t0 = events[0]["ts"] + PS_PER_S // 2
    silent = next(e for e in events if e["sid"] == second and e["ts"] >= t0)
    silent["ts"] = -(-silent["ts"] // SLOT_PS) * SLOT_PS  # on a slot boundary: B = ts + 1 s is another
    kept = [e for e in events if e["sid"] == first or e["ts"] < t0 or e is silent]
    kept.sort(key=lambda e: e["ts"])
    pair = twins(players=["A1"])
    pair.process(kept[: len(kept) // 2])
    pair.process(kept[len(kept) // 2:])
    means = [t for t in pair.per_event.ctx.outputs["A1"].buffer.read(-1).items]
    assert pair.compared == len(means) > 100
