"""Ordering unit (pan/ordering/unit.py): the seed examples, properties, quiet clocks, notices, settings."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pan.ordering.delays import DELAY_BUCKETS_PS
from pan.ordering.released import Released
from pan.ordering.settings import OrderingSettings, k_from_profile, load_profile, validate_ordering_params
from pan.ordering.unit import OrderingUnit
from pan.wire.progress import END_OF_STREAM

# ----------------------------------------------------------------------------- helpers


def ev(name: str) -> dict:
    """'C12' -> an event of stream C with ts 12 (the seed papers' notation)."""
    return {"ts": int(name[1:]), "n": name}


def names(events: list[dict]) -> list[str]:
    return [e["n"] for e in events]


def simulate(
    rng: random.Random,
    n_streams: int,
    n_per: int,
    period: int,
    max_delay: int,
    backdate: int = 0,
    first_delay: int | None = None,
) -> list[tuple[int, int, str, dict]]:
    """Arrivals of a clock stream S0 (no delay) and data streams with delays in [0, max_delay].

    Data streams may back-date (ts up to ``backdate`` below the slot they are sent in).
    A stream's events arrive in index order. At equal wall time data arrives before
    the clock, so a measured delay is the real one rounded up to the clock period.
    ``first_delay`` fixes the delay of S1's first event (to show the bound early).
    """
    arrivals = []
    for s in range(n_streams):
        name = f"S{s}"
        offset = 0 if s == 0 else rng.randrange(period)
        last = -1
        for i in range(n_per):
            slot = i * period + offset
            ts = slot - rng.randint(0, backdate) if s and backdate else slot
            d = 0 if s == 0 else rng.randint(0, max_delay)
            if s == 1 and i == 0 and first_delay is not None:
                d = first_delay
            last = max(last, slot + d)
            arrivals.append((last, 1 if s == 0 else 0, name, {"ts": ts, "i": i, "s": name}))
    arrivals.sort(key=arrival_order)
    return arrivals


def arrival_order(a: tuple[int, int, str, dict]) -> tuple:
    return (a[0], a[1], a[2], a[3]["i"])


def replay(unit: OrderingUnit, arrivals, rng: random.Random | None = None) -> tuple[list, list]:
    """Push arrivals, grouping runs of one stream into batches (random sizes if rng given)."""
    out, late = [], []
    j = 0
    while j < len(arrivals):
        stream = arrivals[j][2]
        k = j
        cap = rng.randint(1, 8) if rng else 1 << 30
        while k < len(arrivals) and arrivals[k][2] == stream and k - j < cap:
            k += 1
        r = unit.push(stream, [a[3] for a in arrivals[j:k]])
        out += r.events
        late += r.late
        j = k
    r = unit.flush()
    return out + r.events, late + r.late


def key_of(unit: OrderingUnit, e: dict) -> tuple[int, int, int]:
    return (e["ts"], unit.streams.index(e["s"]), e["i"])


def ids(events: list[dict]) -> list[tuple[str, int]]:
    return [(e["s"], e["i"]) for e in events]


# ----------------------------------------------------------------------------- the seed example

SEED_STREAM = ["A0", "A2", "C1", "A4", "B3", "C5", "A6", "B10", "A11", "B14", "E20", "C12"]


def test_seed_example_clock_set_by_a():
    """Paper 001 Fig. 3(b)/4: K becomes 3 at A4, C1 leaves at clk 4, B3 leaves at A6."""
    unit = OrderingUnit(OrderingSettings(clock=("A",), lam=0.0), ["A", "B", "C", "E"])
    seen = {}
    for name in SEED_STREAM:
        r = unit.push(name[0], [ev(name)])
        seen[name] = (unit.clk, unit.k, names(r.events), names(r.late))
    assert seen["A0"] == (0, 0, ["A0"], [])
    assert seen["A2"] == (2, 0, ["A2"], [])
    assert seen["C1"] == (2, 0, [], [])  # waits for the next clock event
    assert seen["A4"] == (4, 3, [], ["C1"])  # K = 4 - 1; C1 released at clk 4 (late: A2 already out)
    assert seen["B3"][2:] == ([], []) and seen["C5"][2:] == ([], [])
    assert seen["A6"] == (6, 3, ["B3"], [])  # delay of B3 is 6 - 3 = 3 = K
    assert seen["A11"] == (11, 3, ["A4", "C5", "A6"], [])
    assert seen["C12"][:2] == (11, 3)  # E20 did not move clk_A, so C12 is in time
    assert names(unit.flush().events) == ["B10", "A11", "C12", "B14", "E20"]
    assert unit.late_count == 1 and unit.k_increases == 1 and unit.buffered == 0


def test_seed_example_clock_from_every_stream_makes_c12_late():
    """Same stream with clk = max ts of any input: E20 jumps clk and C12 arrives too late."""
    unit = OrderingUnit(OrderingSettings(lam=0.0, initial_k=3, window=1000), ["A", "B", "C", "E"])
    late = []
    for name in SEED_STREAM:
        late += names(unit.push(name[0], [ev(name)]).late)
    assert "C12" in late


# ----------------------------------------------------------------------------- thesis §3.3.3


COUNTER = ["A0", "X1", "Y0", "A30", "X31", "X55", "A60", "B89", "Y50", "A90"]  # thesis Fig. 3.6, times x10


@pytest.mark.parametrize(("clock", "late"), [(("A", "B"), ["Y50"]), (("A",), [])])
def test_clk_setting_dilemma(clock, late):
    """A (delay 5) and B (delay 2.6) form an ordered sub-stream, yet clocking by both misorders X55/Y50."""
    unit = OrderingUnit(OrderingSettings(clock=clock, lam=0.0), ["A", "B", "X", "Y"])
    out, got_late = [], []
    for name in COUNTER:
        r = unit.push(name[0], [ev(name)])
        out += r.events
        got_late += names(r.late)
    out += unit.flush().events
    assert got_late == late
    if not late:
        assert [e["ts"] for e in out] == sorted(e["ts"] for e in out)


# ----------------------------------------------------------------------------- properties


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32),
    n_streams=st.integers(2, 5),
    max_delay=st.integers(0, 40),
    period=st.integers(1, 7),
    policy=st.sampled_from(["side", "deliver"]),
)
def test_bounded_delays_lambda_zero(seed, n_streams, max_delay, period, policy):
    """λ = 0: nothing lost or duplicated; once K has seen the largest delay, output is in order."""
    arrivals = simulate(random.Random(seed), n_streams, 60, period, max_delay, first_delay=max_delay)
    streams = [f"S{s}" for s in range(n_streams)]
    unit = OrderingUnit(OrderingSettings(clock=("S0",), lam=0.0, late_policy=policy, window=10**6), streams)
    out, late, warm_clk = [], [], None
    for a in arrivals:
        r = unit.push(a[2], [a[3]])
        out += r.events
        late += r.late
        if warm_clk is None and unit.k >= max_delay:
            warm_clk = unit.clk
    r = unit.flush()
    out += r.events
    late += r.late
    late_ids = {id(e) for e in late}
    in_order = [e for e in out if id(e) not in late_ids]
    delivered = out if policy == "deliver" else out + late
    assert sorted(ids(delivered)) == sorted(ids([a[3] for a in arrivals]))  # no loss, no duplicate
    assert len(delivered) == len(arrivals) == unit.released_count + unit.late_count
    assert [key_of(unit, e) for e in in_order] == sorted(key_of(unit, e) for e in in_order)
    assert warm_clk is not None
    assert all(e["ts"] <= warm_clk for e in late), "late events after warm-up"


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), max_delay=st.integers(1, 50), lam=st.sampled_from([2.0, 3.0]))
def test_stationary_delays_with_lambda_no_late_after_warmup(seed, max_delay, lam):
    """λ > 0 with a sliding window much shorter than the run: K never falls below the delay bound."""
    rng = random.Random(seed)
    arrivals = simulate(rng, 4, 800, 3, max_delay)
    unit = OrderingUnit(OrderingSettings(clock=("S0",), lam=lam, window=200), ["S0", "S1", "S2", "S3"])
    warm = len(arrivals) // 5
    late_after = 0
    for j, a in enumerate(arrivals):
        r = unit.push(a[2], [a[3]])
        if j >= warm:
            late_after += len(r.late)
    unit.flush()
    assert late_after == 0
    assert unit.k >= max_delay


def test_determinism_under_arrival_jitter():
    """One recorded input, five replays with different delays and batch sizes: identical output."""
    period, max_delay, backdate = 5, 60, 30
    recorded = simulate(random.Random(7), 5, 200, period, 0, backdate)  # (send slot, ..., event)
    outputs = []
    for run in range(5):
        rng = random.Random(1000 + run)
        last: dict[str, int] = {}
        jittered = []
        for slot, prio, s, e in sorted(recorded, key=lambda a: (a[2], a[3]["i"])):
            at = max(last.get(s, -1), slot + (0 if s == "S0" else rng.randint(0, max_delay)))
            last[s] = at
            jittered.append((at, prio, s, e))
        jittered.sort(key=arrival_order)
        unit = OrderingUnit(
            OrderingSettings(clock=("S0",), lam=1.0, initial_k=max_delay + backdate + period),
            [f"S{s}" for s in range(5)],
        )
        out, late = replay(unit, jittered, rng)
        assert late == [] and unit.late_count == 0
        outputs.append(ids(out))
    assert all(o == outputs[0] for o in outputs[1:])
    assert len(outputs[0]) == 5 * 200
    assert outputs[0] != ids([a[3] for a in recorded])  # the input really was out of order


def test_equal_ts_ordered_by_stream_position_then_index():
    unit = OrderingUnit(OrderingSettings(clock=("C",), initial_k=0), ["A", "B", "C"])
    unit.push("B", [{"ts": 5, "n": "B5a"}, {"ts": 5, "n": "B5b"}])
    unit.push("A", [{"ts": 5, "n": "A5"}])
    r = unit.push("C", [{"ts": 5, "n": "C5"}, {"ts": 9, "n": "C9"}])
    assert names(r.events) == ["A5", "B5a", "B5b", "C5", "C9"]


# ----------------------------------------------------------------------------- late events, K


def _late_scenario(policy: str) -> tuple[OrderingUnit, Released]:
    unit = OrderingUnit(OrderingSettings(clock=("A",), lam=0.0, max_k=5, late_policy=policy), ["A", "B"])
    for t in range(11):
        unit.push("A", [{"ts": t, "n": f"A{t}"}])
    unit.push("B", [{"ts": 2, "n": "B2"}])
    return unit, unit.push("A", [{"ts": 11, "n": "A11"}])


def test_late_policy_side_and_max_k_cap():
    unit, r = _late_scenario("side")
    assert unit.k == 5  # measured 9, capped
    assert names(r.late) == ["B2"] and "B2" not in names(r.events)
    assert unit.late_count == 1
    unit.flush()
    assert unit.released_count + unit.late_count == unit.pushed_count == 13


def test_late_policy_deliver_flags_but_delivers():
    unit, r = _late_scenario("deliver")
    assert names(r.late) == ["B2"]
    assert names(r.events)[0] == "B2"  # handed on out of order, and listed as late
    assert unit.late_count == 1
    unit.flush()
    assert unit.released_count + unit.late_count == unit.pushed_count == 13


def test_k_shrinks_after_window_and_initial_k_is_warmup_floor():
    unit = OrderingUnit(OrderingSettings(clock=("A",), lam=0.0, initial_k=4, window=10), ["A", "B"])
    assert unit.k == 4
    unit.push("A", [{"ts": 0}])
    unit.push("B", [{"ts": 1}])
    unit.push("A", [{"ts": 20}])  # B measured 19
    assert unit.k == 19
    for t in range(21, 40):
        unit.push("A", [{"ts": t}])  # zero delays push the 19 out of the window
    assert unit.k == 0  # warm-up over: the initial K no longer applies
    assert unit.k_increases == 1


def test_delay_histogram_is_cumulative():
    unit = OrderingUnit(OrderingSettings(clock=("A",)), ["A", "B"])
    unit.push("B", [{"ts": 0}, {"ts": 5 * 10**9}])
    unit.push("A", [{"ts": 10**10}])  # B delays: 10 ms and 5 ms; A: 0
    unit.push("A", [{"ts": t} for t in range(10**10, 10**10 + 10)])  # 10 zero delays (sorted path)
    h = unit.delay_histogram()
    assert h["count"] == 13 and h["sum_ps"] == 15 * 10**9
    counts = [c for _le, c in h["buckets"]]
    assert counts == sorted(counts) and counts[-1] == 13
    assert dict(h["buckets"])[0] == 11 and dict(h["buckets"])[5 * 10**9] == 12
    assert len(h["buckets"]) == len(DELAY_BUCKETS_PS) + 1


# ----------------------------------------------------------------------------- quiet clock streams


def test_a_quiet_clock_stream_is_moved_on_by_promises():
    """No ball data at all: the edge promises for the ball (its idle promise) and clk follows the promises."""
    ms = 10**9
    unit = OrderingUnit(OrderingSettings(clock=("BALL",), lam=1.0), ["BALL", "P1", "P2"])
    rng = random.Random(3)
    out, pushed = [], 0
    late_after_warm_up = 0
    for step in range(1, 200):
        now = step * 10 * ms
        before = unit.late_count
        for s in ("P1", "P2"):  # 100 Hz per player, each batch up to 8 ms behind "now"
            lag = rng.randrange(9) * ms
            batch = [{"ts": t} for t in range((step - 1) * 10 * ms - lag, now - lag, 5 * ms)]
            pushed += len(batch)
            out += unit.push(s, batch).events
        out += unit.promise("BALL", now).events  # nothing older than "now" will come from the ball
        if step > 20:
            late_after_warm_up += unit.late_count - before
    assert unit.metrics()["promise_advances"] > 0
    assert late_after_warm_up == 0
    assert 5 * ms <= unit.k <= 20 * ms  # how far behind the promised clk the players came (up to 8 ms)
    assert len(out) + unit.late_count >= pushed - 4 * 6  # all but the last K worth
    assert [e["ts"] for e in out] == sorted(e["ts"] for e in out)


def test_a_half_time_break_needs_no_wall_clock():
    """All inputs quiet: nothing happens until the second half moves clk; then all comes out in order."""
    ms = 10**9
    unit = OrderingUnit(OrderingSettings(clock=("BALL",), lam=1.0, initial_k=20 * ms), ["BALL", "P1"])
    out = []
    for t in range(0, 1000, 2):  # first half: 1 s of ball every 2 ms, player 10 ms late
        out += unit.push("P1", [{"ts": (t - 10) * ms}]).events if t % 10 == 0 and t else []
        out += unit.push("BALL", [{"ts": t * ms}]).events
    held = unit.buffered
    assert held > 0
    for t in range(15 * 60 * 1000, 15 * 60 * 1000 + 200, 2):  # second half
        out += unit.push("BALL", [{"ts": t * ms}]).events
    assert len(out) >= held  # the first half left with the second half's first clock advance
    out += unit.flush().events
    assert unit.late_count == 0
    assert [e["ts"] for e in out] == sorted(e["ts"] for e in out)


def test_every_input_ending_flushes_and_the_end_is_no_delay():
    """END_OF_STREAM promises: a clock stream that ended stops counting; when all ended, all is released."""
    unit = OrderingUnit(OrderingSettings(clock=("A",), initial_k=50), ["A", "B"])
    out = []
    for base in range(0, 1000, 100):
        out += unit.push("B", [{"ts": t} for t in range(base + 5, base + 100, 10)]).events
        out += unit.push("A", [{"ts": t} for t in range(base, base + 100, 10)]).events
    out += unit.push("B", [{"ts": t} for t in range(1005, 1200, 10)]).events  # A has no more data
    assert max(e["ts"] for e in out) <= 990 - 50
    out += unit.promise("A", END_OF_STREAM).events
    # With A ended, B (the fallback) drives clk: everything up to B's progress - K leaves.
    assert unit.clk == 1195 and max(e["ts"] for e in out) == 1195 - 50
    released = unit.promise("B", END_OF_STREAM)
    out += released.events
    assert [e["ts"] for e in out] == sorted(e["ts"] for e in out) and len(out) == unit.pushed_count
    assert unit.buffered == 0 and unit.ended and unit.release_limit == END_OF_STREAM
    assert released.events and unit.metrics()["end_flushes"] == 1
    assert unit.k == 50  # an end is not a measurement
    # A sensor that ended comes back after all: its events are ordinary input again, K stays.
    unit.push("A", [{"ts": t} for t in range(1200, 1300, 10)])
    assert not unit.ended and unit.k == 50 and unit.late_count == 0 and unit.clk == 1290


# ----------------------------------------------------------------------------- K notices


def _hierarchy(notices: bool) -> OrderingUnit:
    """Upstream unit U (K 10, then 40 from T0) feeds stream U over a hop of 2; S is the clock.

    The downstream starts from an offline K of 12, so only the K jump can cause late events.
    """
    hop, t0 = 2, 300
    down = OrderingUnit(
        OrderingSettings(clock=("S",), lam=0.0, initial_k=12, window=10**6, notices=notices), ["S", "U"]
    )
    next_u = 0
    for wall in range(0, 600):
        k_up = 10 if wall - hop < t0 else 40  # K the upstream used when it sent what arrives now
        if wall == t0 + hop:
            down.notice_upstream_k("U", 40)  # rides on the first /data answer after the change
        elif wall == hop:
            down.notice_upstream_k("U", 10)
        batch = []
        while next_u <= wall - hop - k_up:  # released upstream at wall - hop, arriving now
            batch.append({"ts": next_u})
            next_u += 1
        down.push("U", batch)
        down.push("S", [{"ts": wall}])
    down.flush()
    return down


def test_k_notice_prevents_late_events():
    without, with_ = _hierarchy(False), _hierarchy(True)
    assert without.late_count > 0
    assert with_.late_count == 0
    assert with_.k >= 40 + 2  # upper K >= upstream K + hop delay
    assert with_.metrics()["notices_applied"] >= 1


def test_notice_only_acts_on_growth():
    unit = OrderingUnit(OrderingSettings(clock=("A",), lam=0.0), ["A", "B"])
    assert unit.notice_upstream_k("B", 50) is True and unit.k == 50
    assert unit.notice_upstream_k("B", 50) is False
    assert unit.notice_upstream_k("B", 20) is False and unit.k == 50
    assert unit.notice_upstream_k("B", 30) is False  # 20 + 10 does not exceed what is held
    assert unit.notice_upstream_k("B", 80) is True and unit.k == 80  # 30 + growth of 50
    unit.push("B", [{"ts": 0}])
    unit.push("A", [{"ts": 90}])  # a real delay of 90 on B
    assert unit.notice_upstream_k("B", 85) is True and unit.k == 95  # measured 90 + growth of 5
    assert unit.progress().k == 95
    with pytest.raises(ValueError):
        unit.notice_upstream_k("B", -1)


# ----------------------------------------------------------------------------- settings, profile, bad input


def test_params_validation_names_the_key():
    streams = ["A", "B"]
    assert validate_ordering_params({"clock": ["A"], "lambda": 0.5, "late_policy": "deliver"}, streams) == []
    problems = validate_ordering_params(
        {"clock": ["Z"], "lambda": -1, "initial_k": 10, "max_k": 5, "late_policy": "drop", "speed": 1}, streams
    )
    assert problems == ["unknown key 'speed'"]
    problems = validate_ordering_params(
        {"clock": ["Z"], "lambda": -1, "initial_k": 10, "max_k": 5, "late_policy": "drop", "window": 1}, streams
    )
    text = " ".join(problems)
    for key in ("clock", "lambda", "initial_k", "late_policy", "window"):
        assert key + ":" in text
    with pytest.raises(ValueError, match=r"idle_timeout: removed.*idle_after_ms"):
        OrderingSettings.from_params({"idle_timeout": 5.0}, streams)
    s = OrderingSettings.from_params({"clock": ["B"], "lambda": 1, "notices": False}, streams)
    assert s.clock == ("B",) and s.lam == 1 and not s.notices
    assert OrderingSettings.from_params(s.to_params(), streams) == s
    with pytest.raises(ValueError, match="is not an input stream"):
        OrderingUnit(OrderingSettings(clock=("Z",)), streams)


def test_initial_k_from_offline_profile(tmp_path):
    ms = 10**9
    profile = {
        "streams": {
            "BALL": {"p50_ps": 2 * ms, "p99_ps": 4 * ms, "max_ps": 5 * ms, "mean_ps": 2 * ms, "std_ps": ms},
            "P1": {"p50_ps": 40 * ms, "p99_ps": 140 * ms, "max_ps": 150 * ms, "mean_ps": 50 * ms, "std_ps": 9},
            "OTHER": {"p50_ps": 0, "p99_ps": 0, "max_ps": 10**15, "mean_ps": 0, "std_ps": 0},
        }
    }
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(profile))
    loaded = load_profile(path)
    base = OrderingSettings(clock=("BALL",), max_k=10**12)
    s = OrderingSettings.from_profile(loaded, ["BALL", "P1"], base=base)
    assert s.initial_k == 148 * ms  # worst input delay minus the clock's typical delay
    assert OrderingSettings.from_profile(loaded, ["BALL", "P1"], base=base, stat="p99").initial_k == 138 * ms
    assert k_from_profile(loaded, ["NOPE"]) is None
    unit = OrderingUnit(s, ["BALL", "P1"])
    assert unit.k == 148 * ms
    with pytest.raises(ValueError):
        k_from_profile({"streams": {"P1": {"p50_ps": 1}}}, ["P1"])
    (tmp_path / "bad.json").write_text("[]")
    with pytest.raises(ValueError):
        load_profile(tmp_path / "bad.json")


def test_bad_input_is_rejected_without_losing_accepted_events():
    unit = OrderingUnit(OrderingSettings(clock=("A",)), ["A", "B"])
    unit.push("B", [{"ts": 1}])
    with pytest.raises(ValueError, match="unknown input stream"):
        unit.push("Z", [{"ts": 1}])
    with pytest.raises(ValueError, match="ts"):
        unit.push("B", [{"ts": 2}, {"x": 1}])
    with pytest.raises(ValueError, match="ts"):
        unit.push("B", [{"ts": "3"}])
    assert unit.buffered == 1 and unit.pushed_count == 1
    assert len(unit.flush().events) == 1
