"""Active ball and hit candidates: the array path writes what the per-event path writes, byte for byte."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pan.components.testing import build_component, in_input_order, output_tuples
from pan.config.specs import WorkflowError
from tests.support.ballgame import as_events, iter_rows
from tests.support.match_feed import OFFLINE, load_match
from tests.workers.paths import Twins
from workers import debs

S1, E1 = debs.FIRST_HALF
S2, _E2 = debs.SECOND_HALF
PLAYER_SIDS = sorted(sid for sids in debs.PLAYER_SENSORS.values() for sid in sids)

pytestmark = pytest.mark.process  # the rows come from a generated match


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    """Every row of a generated match (balls, players, referee), in ts order."""
    return np.concatenate(list(iter_rows(load_match(tmp_path_factory)["folder"] / "full-game")))


def seconds(rows: np.ndarray, sids: list[int], start_s: float, length_s: float, shift_to: int | None = None
            ) -> list[dict[str, Any]]:
    """The rows of ``sids`` from ``start_s`` for ``length_s`` seconds after kick-off, moved to ``shift_to``."""
    lo = S1 + int(start_s * debs.PS_PER_S)
    part = rows[np.isin(rows[:, 0], sids) & (rows[:, 1] >= lo) & (rows[:, 1] < lo + int(length_s * debs.PS_PER_S))]
    part = part.copy()
    if shift_to is not None:
        part[:, 1] += shift_to - lo
    return as_events(part)


def without_row_store(component: Any) -> dict[str, Any]:
    """A component's counters but its row store's (the twin on arrays has one, the per-event twin not)."""
    return {k: v for k, v in component.counters().items() if k != "column_inputs"}


def in_batches(pair: Twins, events: list[dict[str, Any]], size: int) -> None:
    for start in range(0, len(events), size):
        pair.process(events[start:start + size])


def active_ball(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    comp = build_component("active_ball", {**OFFLINE, "arrays": False}, buffer_size=10**6)
    comp.process(events)
    return [{k: v for k, v in t.items() if k != "i"} for t in output_tuples(comp, "ACTIVEBALL")]


def test_active_ball_empty_one_event_and_half_time_batches(rows: np.ndarray) -> None:
    balls = list(debs.BALLS)
    pair = Twins("active_ball", OFFLINE, buffer_size=100_000)
    pair.process([])
    for ev in seconds(rows, balls, 0, 0.5, S1 - debs.PS_PER_S // 4):  # across kick-off, one row at a time
        pair.process([ev])
        pair.process([])
    # one batch from before the half's end, through the break (ball 10's rows there sent as ball 12, not in play
    # before the second kick-off), into the second half
    second_half = [{**e, "sid": 12} if e["sid"] == 10 and e["ts"] < S2 else e
                   for e in seconds(rows, balls, 14, 4, S2 - debs.PS_PER_S)]
    pair.process(seconds(rows, balls, 10, 4, E1 - 2 * debs.PS_PER_S) + second_half)
    later = seconds(rows, balls, 30, 10, S1 + 30 * debs.PS_PER_S)
    out_from, back_at = S1 + 33 * debs.PS_PER_S, S1 + 33 * debs.PS_PER_S + debs.PS_PER_S // 2
    for e in later:  # every ball off the pitch for half a second: the active one exits, one comes back after
        if out_from <= e["ts"] < back_at:
            e["x"] = debs.X_MIN - 5000
    in_batches(pair, later, 5_000)
    counters = pair.per_event.counters()
    assert counters["outside_game_rows"] > 0 and counters["off_half_rows"] > 0 and counters["exits"] > 0
    assert pair.compared > 10_000 and pair.arrays.rows_on_arrays > 10_000


def test_active_ball_rows_that_are_not_all_ints(rows: np.ndarray) -> None:
    events = seconds(rows, list(debs.BALLS), 2, 2)
    events[5] = {**events[5], "x": float("nan")}
    events[9] = {**events[9], "z": "1"}
    del events[11]["vx"]
    pair = Twins("active_ball", OFFLINE, buffer_size=100_000)
    in_batches(pair, events, 300)
    assert without_row_store(pair.arrays) == pair.per_event.counters() and pair.compared > 1000


def test_the_arrays_param_is_a_bool() -> None:
    for kind in ("active_ball", "ball_hits"):
        with pytest.raises(WorkflowError, match="arrays"):
            build_component(kind, {"arrays": "on"})


def hit_inputs(rows: np.ndarray, start_s: float, length_s: float, shift_to: int | None = None
               ) -> list[dict[str, Any]]:
    """Player rows and the active ball's rows merged as the hit detector's ordering unit releases them."""
    players = seconds(rows, PLAYER_SIDS, start_s, length_s, shift_to)
    ball = active_ball(seconds(rows, list(debs.BALLS), start_s, length_s, shift_to))
    return in_input_order(players, ball)  # ACTIVEBALL is the last input


def test_hits_empty_one_event_and_half_time_batches(rows: np.ndarray) -> None:
    pair = Twins("ball_hits", OFFLINE)
    pair.process([])
    events = hit_inputs(rows, 0, 60)
    for ev in events[:3000]:
        pair.process([ev])
    in_batches(pair, events[3000:], 20_000)
    pair.process(hit_inputs(rows, 10, 3, E1 - 2 * debs.PS_PER_S) + hit_inputs(rows, 20, 3, S2 - debs.PS_PER_S))
    assert pair.per_event.counters()["hits"] >= 10 and pair.compared == pair.per_event.counters()["hits"]
    assert without_row_store(pair.arrays) == pair.per_event.counters()


def test_hits_ties_and_rows_that_are_not_all_ints(rows: np.ndarray) -> None:
    events = hit_inputs(rows, 0, 60)
    for n, ev in enumerate(events):  # some player rows carry floats: their batches go event by event
        if ev["sid"] in PLAYER_SIDS and n % 5 == 0:
            events[n] = {**ev, "x": float(ev["x"])}
    pair = Twins("ball_hits", OFFLINE)
    in_batches(pair, events, 7_000)
    assert pair.compared == pair.per_event.counters()["hits"] >= 10
