"""Impairment profiles: parsing, the per-sensor send schedule, and end to end over real TCP."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import numpy as np
import pytest

from simulator.impair import ImpairProfile, KindParams, Packet, ProfileError, SensorImpairment
from simulator.simulate import simulate
from simulator.simulate_options import SimulateOptions
from simulator.sources import Timeline
from tests.conftest import ROOT, sensor_row, wait_until
from tests.simulator.split_folders import PS, T0, rate_rows, write_split
from tests.simulator.tcp_recorder import Recorder, recorder_workflow

MS = 1_000_000
TL = Timeline(T0, 1.0)


def schedule(params: KindParams, n: int = 4000, hz: int = 200, seed: int = 1, sid: int = 13,
             pieces: int = 1) -> list[Packet]:
    """Every packet of n rows at hz, fed in ``pieces`` batches, in send order."""
    imp = SensorImpairment(params, seed, sid, TL.due_ns, T0, 10**13)
    ts = rate_rows(T0, n / hz, hz)
    lines = [sensor_row(sid, t).encode() + b"\n" for t in ts]
    for chunk in np.array_split(np.arange(n), pieces):
        if len(chunk):
            imp.feed(ts[chunk[0] : chunk[-1] + 1], lines[chunk[0] : chunk[-1] + 1])
    imp.finish()
    return imp.pop_due(float("inf"))


def key(packets: list[Packet]) -> list[tuple[int, list[int], str]]:
    return [(p.send_ns, p.ts, p.fate) for p in packets]


def test_debs_kinds_default_merge_and_non_sensor_streams() -> None:
    profile = ImpairProfile.from_dict({
        "seed": 3,
        "profiles": {"default": {"loss": 0.1, "packet_rows": 5}, "ball": {"packet_rows": 20}},
    })
    assert profile.kind_of("SENSOR4") == "ball" and profile.kind_of("SENSOR106") == "referee"
    assert profile.kind_of("SENSOR47") == "player" and profile.kind_of("INTERRUPTIONS") is None
    assert profile.for_stream("SENSOR4") == KindParams(loss=0.1, packet_rows=20)
    assert profile.for_stream("SENSOR105") == KindParams(loss=0.1, packet_rows=5)
    assert profile.for_stream("INTERRUPTIONS") is None
    custom = ImpairProfile.from_dict({"kinds": {"fast": [1]}, "default_kind": "slow",
                                      "profiles": {"fast": {"loss": 0.5}}})
    assert custom.for_stream("SENSOR1") == KindParams(loss=0.5) and custom.for_stream("SENSOR4") is None


def test_example_profile_loads() -> None:
    profile = ImpairProfile.load(ROOT / "workflows" / "impair_default.json")
    assert profile.for_stream("SENSOR4").packet_rows == 20
    assert profile.for_stream("SENSOR13").outage_mode == "hold"


@pytest.mark.parametrize(("data", "message"), [
    ({"profiles": {"ball": {"lossy": 1}}}, "profiles.ball: unknown key(s) lossy"),
    ({"profiles": {"default": {"loss": 1.5}}}, "profiles.default.loss: must be a number in [0, 1]"),
    ({"profiles": {"ball": {"latency_ms": {"mean": -1}}}}, "profiles.ball.latency_ms.mean"),
    ({"profiles": {"ball": {"packet_rows": 0}}}, "profiles.ball.packet_rows"),
    ({"profiles": {"ball": {"outages": {"windows_s": [[5, 6], [1, 2]]}}}}, "sorted"),
    ({"profiles": {"ball": {"outages": {"every_s": 5, "duration_s": 1, "mode": "later"}}}}, "outages.mode"),
    ({"kinds": {"a": [1], "b": [1]}}, "sensor 1 is also of kind"),
    ({"seed": -1}, "seed"),
    ({"extra": 1}, "unknown key(s) extra"),
])
def test_bad_profiles_name_the_key(data: dict, message: str) -> None:
    with pytest.raises(ProfileError, match=re.escape(message)):
        ImpairProfile.from_dict(data)


def test_bad_profile_file(tmp_path: Path) -> None:
    (tmp_path / "p.json").write_text("{nope")
    with pytest.raises(ProfileError, match="bad JSON"):
        ImpairProfile.load(tmp_path / "p.json")


RICH = KindParams(latency_mean_ms=20, latency_jitter_ms=15, tail_prob=0.05, tail_ms=50, latency_max_ms=300,
                  packet_rows=3, shuffle_in_packet=True, loss=0.05, outage_every_s=5, outage_duration_s=0.5,
                  offset_spread_ms=5, drift_spread_ppm=100)


def test_same_seed_same_schedule_whatever_the_batching() -> None:
    whole = schedule(RICH)
    assert key(whole) == key(schedule(RICH, pieces=7)) == key(schedule(RICH, pieces=333))
    assert key(whole) != key(schedule(RICH, seed=2))
    assert key(whole) != key(schedule(RICH, sid=14))  # every sensor has its own streams


def test_loss_rate_is_about_p() -> None:
    packets = schedule(KindParams(loss=0.1), n=20_000)
    lost = sum(p.fate == "lost" for p in packets)
    assert 0.085 < lost / 20_000 < 0.115
    assert sorted(t for p in packets for t in p.ts) == rate_rows(T0, 100, 200)  # every row accounted for


def test_packaging_holds_k_rows_until_the_last_is_due() -> None:
    packets = schedule(KindParams(packet_rows=10), n=95)
    assert [len(p.ts) for p in packets] == [10] * 9 + [5]  # the leftover leaves at the end
    for p in packets:
        assert p.send_ns == TL.due_one(p.ts[-1])  # no latency: exactly when the last row is measured
        assert p.ts == sorted(p.ts) and len(p.lines) == len(p.ts)


def test_a_partial_packet_leaves_on_its_timer_not_after_the_silence_that_follows() -> None:
    """95 rows at 200 Hz, 60 s of silence (an outage, the half-time break), 20 rows more: 10-row packets.

    Rows 90..94 wait for a packet that the silence never fills; a packetiser sends them once one packet
    span (10 rows: 50 ms) has passed since the first of them, not a minute later with the next rows.
    """
    imp = SensorImpairment(KindParams(packet_rows=10), 1, 13, TL.due_ns, T0, 10**13)
    before = rate_rows(T0, 95 / 200, 200)
    after = [before[-1] + 60 * PS + t - T0 for t in rate_rows(T0, 20 / 200, 200)]
    line = {t: sensor_row(13, t).encode() + b"\n" for t in before + after}
    span = 10 * 5 * 10**9  # ps
    imp.feed(before, [line[t] for t in before])
    imp.close_partial(before[90] + span - 1)  # event time not yet past the timer: still held
    assert [len(p.ts) for p in imp.pop_due(float("inf"))] == [10] * 9
    imp.close_partial(before[-1] + 30 * PS)  # the replay's event time moves on during the silence
    partial = imp.pop_due(float("inf"))
    assert [p.ts for p in partial] == [before[90:]]
    assert partial[0].send_ns == TL.due_one(before[90] + span)  # at the timer, not with the next rows
    imp.feed(after, [line[t] for t in after])
    imp.finish()
    assert [p.ts for p in imp.pop_due(float("inf"))] == [after[:10], after[10:]]


def test_latency_distribution_and_bound() -> None:
    params = KindParams(latency_mean_ms=30, latency_jitter_ms=5, tail_prob=0.02, tail_ms=100, tail_alpha=1.5,
                        latency_max_ms=250)
    packets = schedule(params, n=20_000)
    lat = np.array([(p.send_ns - TL.due_one(p.ts[-1])) / MS for p in packets])
    assert lat.min() >= 0 and lat.max() <= 250 + 1e-6
    assert 29 < np.median(lat) < 31
    heavy = np.mean(lat > 100)
    assert 0.01 < heavy < 0.03  # the tail: about tail_prob of the packets, all beyond tail_ms
    assert np.sum(lat >= 249.99) > 0  # Pareto tail reaches the cap


def test_reordering_happens_yet_rows_are_intact() -> None:
    params = KindParams(latency_mean_ms=20, latency_jitter_ms=15, packet_rows=2, shuffle_in_packet=True, loss=0.02)
    packets = schedule(params, n=2000)
    sent = [t for p in packets if p.fate == "send" for t in p.ts]
    lost = [t for p in packets if p.fate == "lost" for t in p.ts]
    assert sent != sorted(sent)  # packets overtake each other and rows are shuffled inside
    assert sorted(sent + lost) == rate_rows(T0, 10, 200)
    assert len(sent) == len(set(sent))
    inside = sum(p.ts != sorted(p.ts) for p in packets)
    assert inside > 0.3 * len(packets)


def test_outage_drop_and_hold() -> None:
    windows = ((1.0, 1.5), (3.0, 3.25))
    drop = schedule(KindParams(outage_windows_s=windows), n=1000)
    out = [t for p in drop if p.fate == "outage" for t in p.ts]
    in_window = [t for t in rate_rows(T0, 5, 200) if any(T0 + a * PS <= t < T0 + b * PS for a, b in windows)]
    assert out == in_window and len(out) == 150
    hold = schedule(KindParams(outage_windows_s=windows, outage_mode="hold"), n=1000)
    assert all(p.fate == "send" for p in hold)
    held = [p for p in hold if p.ts[0] in set(in_window)]
    assert {p.send_ns for p in held} == {TL.due_one(T0 + int(b * PS)) for _a, b in windows}  # burst at the end
    assert [t for p in hold for t in p.ts] == rate_rows(T0, 5, 200)  # order kept: nothing overtakes a burst


def test_random_outages_are_deterministic_and_cover_about_the_right_share() -> None:
    params = KindParams(outage_every_s=2.0, outage_duration_s=0.5)
    a = schedule(params, n=40_000)
    assert key(a) == key(schedule(params, n=40_000, pieces=11))
    share = sum(p.fate == "outage" for p in a) / len(a)
    assert 0.1 < share < 0.3  # 0.5 / (2 + 0.5) = 0.2 on average


def test_clock_offset_and_drift_shift_the_send_schedule_not_the_rows() -> None:
    packets = schedule(KindParams(offset_ms=-40, drift_ppm=1000), n=2000)
    for p in packets:
        due = TL.due_one(p.ts[-1])
        assert p.send_ns == pytest.approx(due - 40 * MS + due * 1e-3, abs=2)
    assert [t for p in packets for t in p.ts] == rate_rows(T0, 10, 200)
    imp = SensorImpairment(KindParams(offset_ms=-40), 1, 13, TL.due_ns, T0, 10**13)
    assert imp.horizon_ns >= 40 * MS  # rows must be read 40 ms ahead to send them early


async def test_end_to_end_delays_and_loss_match_the_profile(recorder: Recorder, tmp_path: Path) -> None:
    profile = ImpairProfile.from_dict({"seed": 5, "profiles": {"default": {
        "latency_ms": {"mean": 40, "jitter": 5}, "loss": 0.1, "packet_rows": 2}}})
    data = write_split(tmp_path / "split", {13: rate_rows(T0, 1.5, 200), 14: rate_rows(T0, 1.5, 200),
                                            47: rate_rows(T0, 1.5, 200)})
    workflow = recorder_workflow(recorder, ["SENSOR13", "SENSOR14", "SENSOR47"])
    summary = await simulate(SimulateOptions(workflow, data, speedup=1.0, impair=profile, check_period_ms=5))
    assert summary.sent + summary.lost == 900
    assert 0.05 < summary.lost / 900 < 0.16  # profile: 10 % (per packet of 2 rows)
    await wait_until(lambda: len(recorder.lines()) == summary.sent)
    delays = []
    for arrived, line in recorder.lines():
        ts = int(line.split(b",")[1])
        due = summary.start_ns + (ts - summary.origin_ts) // 1000
        if ts % (2 * PS // 200) == (T0 + PS // 200) % (2 * PS // 200):  # last row of its packet
            delays.append((arrived - due) / MS)
    # Profile latency 40 +- 5 ms, plus up to one check period (5 ms) and loopback.
    assert 38 < float(np.median(delays)) < 55
    assert min(delays) > 20


async def test_end_to_end_same_seed_same_bytes_and_drop_outage_reconnects(recorder: Recorder,
                                                                          tmp_path: Path) -> None:
    profile = ImpairProfile.from_dict({"seed": 9, "profiles": {"default": {
        "latency_ms": {"mean": 5, "jitter": 5}, "loss": 0.05, "packet_rows": 4, "shuffle_in_packet": True,
        "outages": {"windows_s": [[0.5, 0.7]], "mode": "drop"}}}})
    data = write_split(tmp_path / "split", {13: rate_rows(T0, 2.0, 200)})
    workflow = recorder_workflow(recorder, ["SENSOR13"])
    runs = []
    for _ in range(2):
        recorder.connections.clear()
        summary = await simulate(SimulateOptions(workflow, data, speedup=0, impair=profile))
        await wait_until(lambda s=summary: len(recorder.lines()) == s.sent)
        await asyncio.sleep(0.05)
        runs.append((summary.as_dict()["streams"], [line for _t, line in recorder.lines()],
                     len(recorder.connections)))
    assert runs[0] == runs[1]
    stats, lines, connections = runs[0]
    assert stats["SENSOR13"]["lost_outage"] == 40 and connections == 2  # dropped, then reconnected
    # The drop ends nothing; the end is said once, on the last connection, after the last row.
    ends = [p for p in recorder.promises() if p["ts"] == 2**62]
    assert ends == [{"stream": "SENSOR13", "ts": 2**62, "promise": True}] and stats["SENSOR13"]["ended"]
    assert b"%d" % 2**62 in recorder.connections[-1][-1][1]
    assert all(b"%d" % 2**62 not in line for _t, line in recorder.connections[0])
    assert lines != sorted(lines, key=lambda x: int(x.split(b",")[1]))
