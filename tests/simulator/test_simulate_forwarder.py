"""Sensor simulator end to end into a real forwarder over real TCP: every row once, in order, paced or not.

Sensor subsets, ts ranges, shares between simulators, the skipped half-time break, unrouted streams and
sensors without data.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from pan.config.specs import Workflow
from pan.repository.server import RepositoryServer
from pan.worker.worker import Worker
from simulator.debs import HALF1, HALF2
from simulator.simulate import simulate
from simulator.simulate_options import SimulateOptions
from tests.conftest import WorkerGroup, forwarder, make_workflow, wait_until
from tests.simulator.split_folders import PS, T0, rate_rows, small_match, write_split


def held(worker: Worker, stream: str) -> list[dict]:
    return [orjson.loads(b) for b in worker.outputs[stream].buffer.read(-1, oldest=1_000_000).items]


def expected_ts(folder: Path, stream: str) -> list[int]:
    return [int(line.split(",")[1]) for line in (folder / f"{stream}.csv").read_text().splitlines()]


async def test_unpaced_delivers_every_row_once_in_order(fwd: tuple[Worker, Workflow], tmp_path: Path) -> None:
    worker, workflow = fwd
    data = small_match(tmp_path / "split")
    summary = await simulate(SimulateOptions(workflow, data, speedup=0))
    # 2 interruption events plus a heartbeat every 10 ms of event time over the 1 s of data
    totals = {"SENSOR4": 2000, "SENSOR13": 200, "SENSOR47": 200, "INTERRUPTIONS": 102}
    assert {s: st.sent for s, st in summary.streams.items()} == totals
    assert summary.lost == 0 and summary.errors == [] and summary.unrouted == []
    await wait_until(lambda: worker.component.counters()["rows"] == sum(totals.values()))
    for stream in ("SENSOR4", "SENSOR13", "SENSOR47"):
        assert [t["ts"] for t in held(worker, stream)] == expected_ts(data, stream)
    interruptions = held(worker, "INTERRUPTIONS")
    assert [(t["ts"], t["event"]) for t in interruptions if t["event"] != "heartbeat"] == [
        (T0 + PS // 4, "begin"), (T0 + PS // 2, "end")]
    beats = [t["ts"] for t in interruptions if t["event"] == "heartbeat"]
    assert len(beats) == 100 and all(b % (PS // 100) == 0 for b in beats)
    assert [t["ts"] for t in interruptions] == sorted(t["ts"] for t in interruptions)
    c = worker.component.counters()
    assert c["connections"] == 4 and c["malformed"] == 0 and c["unexpected"] == 0  # one connection per stream


async def test_paced_replay_follows_event_time(fwd: tuple[Worker, Workflow], tmp_path: Path) -> None:
    worker, workflow = fwd
    data = small_match(tmp_path / "split", seconds=1.0)
    log_path = tmp_path / "send.csv"
    summary = await simulate(SimulateOptions(workflow, data, speedup=2.0, send_log=log_path, check_period_ms=10))
    assert summary.sent == 2502 and summary.lost == 0  # 2400 rows, 2 interruptions, 100 heartbeats
    assert 0.4 < summary.elapsed_s < 1.5  # 1 s of match at speedup 2, loosely
    await wait_until(lambda: worker.component.counters()["rows"] == 2502)
    for stream in ("SENSOR4", "SENSOR13", "SENSOR47"):
        assert [t["ts"] for t in held(worker, stream)] == expected_ts(data, stream)
    # The send log: one line per row, each sent at (or shortly after) its due time.
    rows = [line.split(",") for line in log_path.read_text().splitlines()[1:]]
    assert len(rows) == 2502
    late = [int(ns) - summary.start_ns - (int(ts) - summary.origin_ts) / 2000 for _s, ts, ns in rows]
    assert min(late) >= -1_000_000  # never early (1 ms slack for clock reads)
    assert sorted(late)[len(late) // 2] < 50_000_000  # typically within a few check periods


async def test_sensor_subset_and_ts_range(fwd: tuple[Worker, Workflow], tmp_path: Path) -> None:
    worker, workflow = fwd
    data = small_match(tmp_path / "split")
    lo, hi = T0 + PS // 10, T0 + PS // 5
    summary = await simulate(SimulateOptions(workflow, data, sensors=["SENSOR4", "13"], speedup=0,
                                             from_ts=lo, to_ts=hi))
    want4 = [t for t in expected_ts(data, "SENSOR4") if lo <= t <= hi]
    want13 = [t for t in expected_ts(data, "SENSOR13") if lo <= t <= hi]
    assert set(summary.streams) == {"SENSOR4", "SENSOR13"}
    assert summary.streams["SENSOR4"].sent == len(want4) == 201
    assert summary.streams["SENSOR4"].skipped == 2000 - 201
    await wait_until(lambda: worker.component.counters()["rows"] == len(want4) + len(want13))
    assert [t["ts"] for t in held(worker, "SENSOR4")] == want4
    assert [t["ts"] for t in held(worker, "SENSOR13")] == want13
    assert held(worker, "SENSOR47") == [] and held(worker, "INTERRUPTIONS") == []


async def test_shares_of_several_simulators_feed_every_sensor_once(fwd: tuple[Worker, Workflow],
                                                                    tmp_path: Path) -> None:
    """``share=(k, n)``: n simulators (here on one machine, unpaced) split the sensors between them."""
    worker, workflow = fwd
    data = small_match(tmp_path / "split")
    summaries = [await simulate(SimulateOptions(workflow, data, share=(k, 2), speedup=0)) for k in range(2)]
    streams = [set(s.streams) for s in summaries]
    assert streams[0] & streams[1] == set()
    assert streams[0] | streams[1] == {"SENSOR4", "SENSOR13", "SENSOR47", "INTERRUPTIONS"}
    assert "INTERRUPTIONS" in streams[0] and all(s.lost == 0 and s.errors == [] for s in summaries)
    totals = {"SENSOR4": 2000, "SENSOR13": 200, "SENSOR47": 200, "INTERRUPTIONS": 102}
    await wait_until(lambda: worker.component.counters()["rows"] == sum(totals.values()))
    for stream in ("SENSOR4", "SENSOR13", "SENSOR47"):
        assert [t["ts"] for t in held(worker, stream)] == expected_ts(data, stream)


async def test_skip_halftime_jumps_over_the_break(fwd: tuple[Worker, Workflow], tmp_path: Path) -> None:
    worker, workflow = fwd
    end1, start2 = HALF1[1], HALF2[0]
    stamps = [*rate_rows(end1 - PS // 2, 0.5, 200), *rate_rows(end1 + 60 * PS, 0.2, 200),
              *rate_rows(start2, 0.5, 200)]
    data = write_split(tmp_path / "split", {13: stamps})
    summary = await simulate(SimulateOptions(workflow, data, speedup=1.0, skip_halftime=True))
    assert summary.streams["SENSOR13"].sent == 200 and summary.streams["SENSOR13"].skipped == 40
    assert summary.elapsed_s < 3.0  # 1 s of play, not the 9-minute break
    await wait_until(lambda: len(held(worker, "SENSOR13")) == 200)
    got = [t["ts"] for t in held(worker, "SENSOR13")]
    assert got == [t for t in stamps if not end1 < t < start2]


async def test_skip_halftime_cuts_a_short_matchs_longer_break(fwd: tuple[Worker, Workflow], tmp_path: Path) -> None:
    """A generated match's first half ends long before the real one's whistle: its whole break is cut."""
    worker, workflow = fwd
    first = rate_rows(HALF1[0], 0.5, 200)
    second = rate_rows(HALF2[0] - PS, 0.5, 200)  # warm-up rows before the real kick-off time
    data = write_split(tmp_path / "split", {13: first + second, 4: rate_rows(HALF1[0], 0.5, 2000)})
    options = SimulateOptions(workflow, data, speedup=1.0, skip_halftime=True)
    summary = await asyncio.wait_for(simulate(options), 300)  # not the 38 minutes of break
    assert summary.streams["SENSOR13"].sent == 200 and summary.elapsed_s < 30.0
    await wait_until(lambda: len(held(worker, "SENSOR13")) == 200)
    assert [t["ts"] for t in held(worker, "SENSOR13")] == first + second


async def test_unrouted_streams_are_reported_and_skipped(repository: RepositoryServer, workers: WorkerGroup,
                                                         tmp_path: Path) -> None:
    workflow = make_workflow(repository.port, [forwarder("F", ["SENSOR4"])])
    (worker,) = await workers.start(workflow)
    data = small_match(tmp_path / "split")
    summary = await simulate(SimulateOptions(workflow, data, speedup=0, sensors=["SENSOR4", "SENSOR47", "SENSOR99"]))
    assert summary.unrouted == ["SENSOR47"]
    assert not any("SENSOR47" in e for e in summary.errors)  # reported as unrouted, not as an error
    assert any("SENSOR99" in e and "no file" in e for e in summary.errors)
    assert summary.streams["SENSOR4"].sent == 2000
    await wait_until(lambda: worker.component.counters()["rows"] == 2000)


async def test_routed_sensor_without_data_is_promised_ended(repository: RepositoryServer, workers: WorkerGroup,
                                                            tmp_path: Path) -> None:
    """A ball the data never uses: its receiver learns at the start that nothing will come."""
    workflow = make_workflow(repository.port, [forwarder("F", ["SENSOR4", "SENSOR12", "SENSOR13"])])
    (worker,) = await workers.start(workflow)
    data = write_split(tmp_path / "split", {4: rate_rows(T0, 0.1, 2000), 13: rate_rows(T0, 0.1, 200)})
    summary = await simulate(SimulateOptions(workflow, data, speedup=0))
    assert summary.no_data == ["SENSOR12"] and summary.errors == []
    assert summary.as_dict()["no_data"] == ["SENSOR12"]
    await wait_until(lambda: worker.outputs["SENSOR12"].progress.wm == 2**62)
    assert worker.outputs["SENSOR12"].buffer.last == -1
    ended = [s for s in ("SENSOR4", "SENSOR13") if summary.streams[s].ended]
    assert ended == ["SENSOR4", "SENSOR13"]  # each sensor's end promise went out when its data was exhausted
    silent = sum(stats.promises for stats in summary.streams.values())
    await wait_until(lambda: worker.component.counters()["promises"] == 1 + len(ended) + silent)
    assert worker.component.counters()["rows"] == 220 and worker.component.counters()["promises_refused"] == {}
    assert worker.outputs["SENSOR4"].progress.wm == worker.outputs["SENSOR13"].progress.wm == 2**62
