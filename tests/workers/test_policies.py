"""Detection policies (docs/policies.md): the generic plumbing of ordered components, the ``policy`` key
(pan/components/ordered_spec.py) and the ``input_lost`` hook (pan/components/input_loss.py).

The ``policy`` key is validated for every ordered component, and a component
hears of lost input through ``input_lost``: runs of missing indices in an input
(with the ts of the tuples around them) and events the ordering unit found late.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pan.components.testing import build_component
from pan.config.specs import WorkflowError
from pan.workflow.parser import parse_workflow


def merge_workflow(params: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "p",
        "workers": [
            {"name": "f", "type": "forwarder", "host": "127.0.0.1", "port": 41001,
             "params": {"ingest_port": 41002, "inter_pan_inputs": ["S1"]}},
            {"name": "m", "type": "merge", "host": "127.0.0.1", "port": 41003, "inputs": ["S1"],
             "params": {"output": "OUT", **params}},
        ],
    }


@pytest.mark.parametrize("policy", ["best_effort", "nfp"])
def test_policy_values_are_accepted(policy: str) -> None:
    parse_workflow(merge_workflow({"policy": policy}))


@pytest.mark.parametrize("value", ["NFP", "", 1, None])
def test_other_policy_values_are_refused(value: Any) -> None:
    with pytest.raises(WorkflowError) as caught:
        parse_workflow(merge_workflow({"policy": value}))
    assert any("policy: must be one of best_effort, nfp" in p for p in caught.value.problems)


def recording(component: Any, enough: int = 1, done: asyncio.Event | None = None) -> list[tuple[Any, ...]]:
    """Records ``input_lost`` calls (and sets ``done`` after ``enough`` of them)."""
    reports: list[tuple[Any, ...]] = []
    original = component.input_lost

    def record(stream: str | None, count: int, ts_from: int | None, ts_to: int | None) -> None:
        reports.append((stream, count, ts_from, ts_to))
        original(stream, count, ts_from, ts_to)
        if done is not None and len(reports) >= enough:
            done.set()

    component.input_lost = record
    return reports


async def test_index_gaps_in_an_input_are_reported_with_their_ts_range() -> None:
    comp = build_component("merge", {"output": "OUT", "policy": "nfp", "clock_mode": "watermark"}, inputs=["S1"])
    done = asyncio.Event()
    reports = recording(comp, 2, done)
    stream = comp.ctx.inputs["S1"]
    # Indices 0-2, then 3-4 missed upstream, 5-6, then 7 missed, 8.
    for index, ts in [(0, 10), (1, 20), (2, 30), (5, 60), (6, 70), (8, 90)]:
        stream.buffer.append({"i": index, "ts": ts}, index)
    await comp.start()
    task = asyncio.create_task(comp.run())
    try:
        async with asyncio.timeout(30):
            await done.wait()
    finally:
        task.cancel()
    assert reports == [("S1", 2, 30, 60), ("S1", 1, 70, 90)]
    assert comp.counters()["policy"] == "nfp" and comp.counters()["input_missed"] == 3


def test_late_events_are_reported_at_their_ts() -> None:
    # max mode, K fixed at 0 (lambda 0): clk is the newest ts, and everything older is released at once.
    comp = build_component("merge", {"output": "OUT", "clock_mode": "max", "lambda": 0.0, "late_policy": "side"},
                           inputs=["S1", "S2"])
    reports = recording(comp)
    comp.feed("S1", [{"ts": 100}, {"ts": 300}])
    comp.feed("S2", [{"ts": 50}])  # behind what was released: late
    late = [r for r in reports if r[0] is None]
    assert late == [(None, 1, 50, 50)]
    assert comp.counters()["policy"] == "best_effort"


# --- the ball components under nfp ------------------------------------------------------------------

MS = 10**9


def ball_row(ts: int, a: int = 0, x: int = 26000, y: int = 0) -> dict[str, int]:
    return {"sid": 4, "ts": ts, "x": x, "y": y, "z": 100, "v": 0, "a": a, "vx": 0, "vy": 0, "vz": 0,
            "ax": 0, "ay": 0, "az": 0}


def player_row(sid: int, ts: int, x: int, y: int) -> dict[str, int]:
    return {"sid": sid, "ts": ts, "x": x, "y": y, "z": 100, "v": 0, "a": 0, "vx": 0, "vy": 0, "vz": 0,
            "ax": 0, "ay": 0, "az": 0}


def kick_feed(drop_b3_rows: int) -> list[dict[str, int]]:
    """A2 (sid 47) 0.9 m from a kick, B3 (sid 65) 1.1 m away (out of range): with B3's last ``drop_b3_rows``
    rows lost, B3's sensor could have come nearer than A2's in the meantime (at up to 12 m/s)."""
    from workers.debs import FIRST_HALF

    t0 = FIRST_HALF[0] + 1000 * MS
    rows = [player_row(47, t0 - k * 5 * MS, 26900, 0) for k in range(10, 0, -1)]
    rows += [player_row(65, t0 - k * 5 * MS, 26000, 1100) for k in range(10, drop_b3_rows, -1)]
    rows += [ball_row(t0 - k * MS // 2) for k in range(20, 0, -1)]
    rows += [ball_row(t0 + k * MS // 2, a=90_000_000 if k < 4 else 0) for k in range(0, 10)]
    return sorted(rows, key=lambda r: r["ts"])


@pytest.mark.parametrize("policy", ["best_effort", "nfp"])
def test_a_hit_that_lost_rows_could_change_is_withheld_under_nfp(policy: str) -> None:
    from pan.components.testing import output_tuples

    out = {}
    for dropped in (0, 3):
        hits = build_component("ball_hits", {"policy": policy})
        hits.process(kick_feed(dropped))
        out[dropped] = [{k: v for k, v in t.items() if k != "i"} for t in output_tuples(hits, "BALLHITS")]
    assert [t.get("player") for t in out[0]] == ["A2"]  # nothing lost: the same under both policies
    if policy == "best_effort":
        assert out[3] == out[0]
    else:
        assert [t.get("player") for t in out[3]] == [None] and out[3][0]["doubt"] == "hit"


def test_a_possession_across_a_ball_data_gap_is_uncertain_under_nfp() -> None:
    from workers.debs import FIRST_HALF

    t0 = FIRST_HALF[0] + 1000 * MS
    hit = {"ts": t0, "player": "A2", "sid": 4, "x": 26000, "y": 0, "z": 100, "a": 90_000_000}
    other = {**hit, "ts": t0 + 600 * MS, "player": "B3"}
    again = {**hit, "ts": t0 + 1200 * MS, "player": "A2"}
    end = {**hit, "ts": t0 + 1800 * MS, "player": "B3"}
    rows = [ball_row(t0 + k * MS // 2) for k in range(0, 4000)]
    rows = [r for r in rows if not t0 + 800 * MS < r["ts"] < t0 + 805 * MS]  # 10 ball rows lost in B3's possession
    feed = sorted([hit, other, again, end, *rows], key=lambda r: (r["ts"], "player" not in r))
    verdicts = {}
    for policy in ("best_effort", "nfp"):
        comp = build_component("player_possession", {"policy": policy})
        comp.process(feed)
        verdicts[policy] = [(p, (s - t0) // MS, (e - t0) // MS, c) for p, s, e, c in comp.intervals]
    assert verdicts["best_effort"] == [("A2", 0, 600, True), ("B3", 600, 1200, True), ("A2", 1200, 1800, True)]
    assert verdicts["nfp"] == [("A2", 0, 600, True), ("B3", 600, 1200, False), ("A2", 1200, 1800, True)]


@pytest.mark.heavy
@pytest.mark.timeout(600)
def test_no_false_positive_under_nfp_in_the_loss_experiment(tmp_path: Any) -> None:
    """One generated minute at 10% row loss: every nfp output is in the generator's truth."""
    from benchmarks.policies import experiment

    records = list(experiment(1.0, [3], [0.1], tmp_path))
    nfp = next(r for r in records if r["policy"] == "nfp")["scores"]
    best = next(r for r in records if r["policy"] == "best_effort")["scores"]
    for name, result in nfp.items():
        assert result["false_positives"] == 0, (name, result)
        assert result["recall"] <= best[name]["recall"]
    assert nfp["hits"]["truth"] > 20 and nfp["possession"]["found"] > 0
