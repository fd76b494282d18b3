"""Sensor simulator end to end: real TCP into real forwarders (or a byte recorder), small split folders."""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from pathlib import Path

import orjson
import pytest

from pan.config.specs import Workflow
from pan.launch.lifeline import shared_lifeline
from pan.repository.server import RepositoryServer
from pan.worker.worker import Worker
from simulator.clock import SkewedTime
from simulator.debs import HALF1, HALF2
from simulator.replay import SUPERVISED_CONNECT_TIMEOUT_S, SUPERVISED_GIVE_UP_S
from simulator.simulate import GIVE_UP_S, UNPACED_SLICE_PS, EventTimeGate, SimulateOptions, simulate
from simulator.sources import halftime_break, rows_around
from tests.conftest import ROOT, WorkerGroup, forwarder, free_port, make_workflow, sensor_row, wait_until

PS = 10**12
T0 = HALF1[0]  # kick-off, ps
ALL = ["SENSOR4", "SENSOR13", "SENSOR47", "INTERRUPTIONS"]


def write_split(folder: Path, rows: dict[int, list[int]], interruptions: list[tuple[int, int]] = ()) -> Path:
    """A `pan split`-format folder: SENSOR<sid>.csv (no header, ts-sorted) and interruptions.csv."""
    folder.mkdir(parents=True, exist_ok=True)
    for sid, stamps in rows.items():
        text = "".join(sensor_row(sid, ts, k) + "\n" for k, ts in enumerate(stamps))
        (folder / f"SENSOR{sid}.csv").write_text(text)
    if interruptions:
        lines = ["start_ts,end_ts", *(f"{a},{b}" for a, b in interruptions)]
        (folder / "interruptions.csv").write_text("\n".join(lines) + "\n")
    return folder


def rate_rows(start: int, seconds: float, hz: int) -> list[int]:
    period = PS // hz
    return [start + n * period for n in range(int(seconds * hz))]


def small_match(folder: Path, seconds: float = 1.0) -> Path:
    return write_split(
        folder,
        {4: rate_rows(T0, seconds, 2000), 13: rate_rows(T0 + 1, seconds, 200), 47: rate_rows(T0 + 2, seconds, 200)},
        [(T0 + PS // 4, T0 + PS // 2)],
    )


def held(worker: Worker, stream: str) -> list[dict]:
    return [orjson.loads(b) for b in worker.outputs[stream].buffer.read(-1, oldest=1_000_000).items]


def expected_ts(folder: Path, stream: str) -> list[int]:
    return [int(line.split(",")[1]) for line in (folder / f"{stream}.csv").read_text().splitlines()]


@pytest.fixture
async def fwd(repository: RepositoryServer, workers: WorkerGroup) -> tuple[Worker, Workflow]:
    workflow = make_workflow(repository.port, [forwarder("F", ALL, buffer_size=100_000)])
    (worker,) = await workers.start(workflow)
    return worker, workflow


class Recorder:
    """A plain TCP receiver: keeps every connection's lines with their arrival time (ns, local clock)."""

    def __init__(self) -> None:
        self.connections: list[list[tuple[int, bytes]]] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        lines: list[tuple[int, bytes]] = []
        self.connections.append(lines)
        while line := await reader.readline():
            lines.append((time.time_ns(), line))
        writer.close()

    def lines(self) -> list[tuple[int, bytes]]:
        """Every data line (promise lines, which carry no row, left out)."""
        return [x for conn in self.connections for x in conn if b'"promise":true' not in x[1]]

    def promises(self) -> list[dict]:
        return [orjson.loads(x[1]) for conn in self.connections for x in conn if b'"promise":true' in x[1]]


@pytest.fixture
async def recorder() -> Recorder:
    rec = Recorder()
    await rec.start()
    yield rec
    await rec.stop()


def recorder_workflow(rec: Recorder, streams: list[str]) -> Workflow:
    return make_workflow(free_port(), [forwarder("R", streams, ingest_port=rec.port)])


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


def test_rows_around_finds_the_neighbours_of_a_bound_by_bisection(tmp_path: Path) -> None:
    stamps = rate_rows(HALF1[0], 2.0, 200) + rate_rows(HALF2[0], 2.0, 200)
    data = write_split(tmp_path / "split", {13: stamps})
    path = data / "SENSOR13.csv"
    for bound in (stamps[0] - 1, stamps[0], stamps[150], stamps[399], stamps[400] - 1, stamps[-1], stamps[-1] + 1):
        before = max((t for t in stamps if t <= bound), default=None)
        after = min((t for t in stamps if t > bound), default=None)
        for scan in (1, 100, 1 << 16):
            assert rows_around(path, bound, scan) == (before, after), (bound, scan)
    assert halftime_break({"SENSOR13": path}, HALF1[1], HALF2[0]) == (stamps[399], stamps[400])


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


@pytest.mark.parametrize("speedup", [0.0, 4.0])
async def test_unreachable_receiver_is_reported_not_fatal(tmp_path: Path, speedup: float) -> None:
    workflow = make_workflow(free_port(), [forwarder("F", ALL)])  # nobody listens on its ingest port
    data = small_match(tmp_path / "split", seconds=0.5)
    summary = await simulate(SimulateOptions(workflow, data, speedup=speedup, give_up_s=0.3))
    assert summary.sent == 0
    assert summary.lost == 1000 + 100 + 100 + 2 + 50  # rows, interruptions, heartbeats
    assert summary.streams["SENSOR4"].lost_disconnected == 1000
    assert summary.streams["SENSOR4"].connect_failures >= 1
    assert any("cannot connect" in e for e in summary.errors)


async def late_receiver(port: int) -> tuple[asyncio.Server, list[bytes]]:
    """A receiver that starts listening on ``port`` now, and the data rows (not promises) it gets."""
    got: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            if b'"promise":true' not in line:
                got.append(line)

    return await asyncio.start_server(handle, "127.0.0.1", port), got


async def test_receiver_that_comes_up_late_gets_the_rest(recorder: Recorder, tmp_path: Path) -> None:
    """Paced: rows due while the receiver is away are lost and counted; later ones arrive."""
    port = free_port()
    workflow = make_workflow(free_port(), [forwarder("R", ["SENSOR13"], ingest_port=port)])
    data = write_split(tmp_path / "split", {13: rate_rows(T0, 1.0, 200)})
    task = asyncio.create_task(simulate(SimulateOptions(workflow, data, speedup=1.0)))
    await asyncio.sleep(0.4)
    server, got = await late_receiver(port)
    try:
        summary = await task
    finally:
        server.close()
    stats = summary.streams["SENSOR13"]
    assert stats.sent + stats.lost_disconnected == 200
    assert 0 < stats.sent < 200 and stats.connects == 1
    await wait_until(lambda: len(got) == stats.sent)
    assert [int(x.split(b",")[1]) for x in got] == rate_rows(T0, 1.0, 200)[200 - stats.sent :]


@pytest.mark.slow  # it must outlast the plain give-up time
async def test_a_replays_unpaced_sensors_wait_for_a_receiver_longer_than_a_plain_simulation(tmp_path: Path) -> None:
    """`pan replay` supervises its peers, so a silent receiver is starved, not gone: every row reaches it later."""
    port = free_port()
    workflow = make_workflow(free_port(), [forwarder("R", ["SENSOR13"], ingest_port=port)])
    rows = rate_rows(T0, 1.0, 200)
    data = write_split(tmp_path / "split", {13: rows})
    options = SimulateOptions(workflow, data, speedup=0.0, give_up_s=SUPERVISED_GIVE_UP_S,
                              connect_timeout_s=SUPERVISED_CONNECT_TIMEOUT_S)
    task = asyncio.create_task(simulate(options))
    await asyncio.sleep(GIVE_UP_S + 1)  # the receiver is away longer than a plain `pan simulate` waits
    assert not task.done()
    server, got = await late_receiver(port)
    try:
        summary = await asyncio.wait_for(task, 120)
    finally:
        server.close()
    stats = summary.streams["SENSOR13"]
    assert stats.sent == 200 and stats.lost == 0 and stats.connect_failures >= 1
    await wait_until(lambda: len(got) == 200)
    assert [int(x.split(b",")[1]) for x in got] == rows


async def test_wtt_aligns_two_simulators_with_skewed_clocks(recorder: Recorder, tmp_path: Path) -> None:
    """Two simulators, one clock 20 s ahead: with WTT both start at the same master time."""
    data = write_split(tmp_path / "split", {13: rate_rows(T0, 0.3, 200), 14: rate_rows(T0, 0.3, 200)})
    workflow = recorder_workflow(recorder, ["SENSOR13", "SENSOR14"])
    port = free_port()
    master_clock = SkewedTime()
    start_ms = master_clock.now_ns() // 1_000_000 + 1200
    master = SimulateOptions(workflow, data, sensors=["SENSOR13"], speedup=1.0, start_at_ms=start_ms,
                             clock=master_clock, wtt_master=("127.0.0.1", port))
    slave = SimulateOptions(workflow, data, sensors=["SENSOR14"], speedup=1.0, start_at_ms=start_ms,
                            clock=SkewedTime(offset_ns=20 * PS // 1000), wtt_slave=("127.0.0.1", port))
    a, b = await asyncio.gather(simulate(master), simulate(slave))
    assert a.sent == b.sent == 60
    assert b.wtt["role"] == "slave" and abs(b.wtt["delta_ns"] + 20 * 10**9) < 50_000_000
    first = {}
    for arrived, line in recorder.lines():
        first.setdefault(line.split(b",")[0], arrived)
    assert abs(first[b"13"] - first[b"14"]) < 50_000_000  # same moment, despite the 20 s skew


@pytest.mark.process
async def test_cli_prints_json_summary(fwd: tuple[Worker, Workflow], tmp_path: Path) -> None:
    worker, workflow = fwd
    data = small_match(tmp_path / "split", seconds=0.5)
    wf_path = tmp_path / "wf.json"
    spec = workflow.workers[0]
    wf_path.write_text(json.dumps({
        "name": "t", "repository": {"host": "127.0.0.1", "port": workflow.repository.port},
        "workers": [{"name": "F", "type": "forwarder", "host": "127.0.0.1", "port": spec.port,
                     "params": {"ingest_port": spec.params["ingest_port"], "inter_pan_inputs": ALL,
                                "decoder": "debs_csv"}}]}))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pan", "simulate", "--workflow", str(wf_path), "--data", str(data),
        "--speedup", "0", "--quiet", cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    summary = json.loads(out)
    assert summary["sent"] == 1000 + 100 + 100 + 2 + 50 and summary["lost"] == 0
    assert summary["streams"]["SENSOR4"]["receiver"] == f"127.0.0.1:{spec.params['ingest_port']}"
    await wait_until(lambda: worker.component.counters()["rows"] == 1252)


@pytest.mark.process
async def test_cli_rejects_bad_arguments(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pan", "simulate", "--workflow", str(tmp_path / "missing.json"), "--data",
        str(tmp_path), cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2 and b"cannot read file" in err


@pytest.mark.slow
async def test_all_sensors_60_s_at_speedup_10_arrive_once_in_order(processes, tmp_path: Path) -> None:
    """Acceptance: 42 sensors, 60 s of game time at speedup 10, into two forwarder processes."""
    from tests.conftest import get_json, workflow_dict

    balls = [4, 8, 10, 12]
    others = [13, 14, 97, 98, 47, 16, 49, 88, 19, 52, 53, 54, 23, 24, 57, 58, 59, 28, 61, 62, 99, 100, 63, 64,
              65, 66, 67, 68, 69, 38, 71, 40, 73, 74, 75, 44, 105, 106]
    rows = {sid: rate_rows(T0 + sid, 60, 2000 if sid in balls else 200) for sid in balls + others}
    data = write_split(tmp_path / "split", rows)
    streams = [f"SENSOR{s}" for s in rows]
    specs = [forwarder("F1", streams[:21], buffer_size=130_000, peer="p1"),
             forwarder("F2", streams[21:], buffer_size=130_000, peer="p2")]
    wf = workflow_dict(free_port(), specs)
    path = processes.write_workflow(wf)
    processes.pan("run", str(path))

    async def up() -> bool:
        try:
            for spec in specs:
                if (await get_json(f"http://127.0.0.1:{spec['port']}/health"))[0] != 200:
                    return False
        except OSError:
            return False
        return True

    await wait_until(up, timeout_s=30)
    from pan.workflow.parser import load_workflow

    summary = await simulate(SimulateOptions(load_workflow(path), data, speedup=10.0, check_period_ms=10))
    total = sum(len(v) for v in rows.values())
    assert summary.sent == total and summary.lost == 0 and summary.errors == []
    assert summary.elapsed_s > 5.5  # paced; may take longer when the forwarders cannot keep up
    for spec in specs:
        for stream in spec["params"]["inter_pan_inputs"]:
            want = rows[int(stream.removeprefix("SENSOR"))]
            got: list[int] = []
            while len(got) < len(want):
                status, page = await get_json(f"http://127.0.0.1:{spec['port']}/data", s=stream,
                                              i=len(got) - 1, n=100_000, w=10_000)
                assert status == 200 and page["missed"] == 0
                got.extend(t["ts"] for t in page["tuples"])
            assert got == want, stream


@pytest.mark.process
def test_replay_cli_on_free_ports_records_every_row(tmp_path: Path) -> None:
    """`pan replay --free-ports` moves the shipped workflow off its fixed ports and records everything."""
    import subprocess

    split = tmp_path / "split"
    split.mkdir()
    rows = ROOT.joinpath("workers", "data", "demo_rows.csv").read_text().splitlines()
    by_sensor: dict[str, list[str]] = {}
    for row in rows:
        by_sensor.setdefault(row.split(",", 1)[0], []).append(row)
    for sid, lines in by_sensor.items():
        (split / f"SENSOR{sid}.csv").write_text("\n".join(sorted(lines, key=lambda r: int(r.split(",")[1]))) + "\n")
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "pan", "replay", "--json", str(ROOT / "workflows" / "demo_forwarding.json"),
         "--data", str(split), "--record", str(out), "--free-ports", "--quiet-s", "1"],
        capture_output=True, timeout=120, check=False, cwd=ROOT,
        **shared_lifeline().spawn_options(),  # a killed pytest leaves no replay behind
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    report = orjson.loads(done.stdout)
    moved = orjson.loads((out / "workflow.json").read_bytes())
    shipped = orjson.loads((ROOT / "workflows" / "demo_forwarding.json").read_bytes())
    assert moved["repository"]["port"] != shipped["repository"]["port"]
    assert report["sent"] == len(rows)
    assert sum(report["streams"].values()) == len(rows)
    assert all(len((out / f"SENSOR{sid}.jsonl").read_bytes().splitlines()) == len(lines)
               for sid, lines in by_sensor.items())


async def test_no_sensor_passes_the_limit_before_every_sensor_has_reached_it() -> None:
    """The gate's round ends when its last sensor arrives, or finishes: not one sensor earlier."""
    gate = EventTimeGate(T0, UNPACED_SLICE_PS, participants=3)
    first = [asyncio.create_task(gate.arrive(False)) for _ in range(2)]
    for _ in range(5):  # let both run up to their wait
        await asyncio.sleep(0)
    assert not any(task.done() for task in first) and gate.limit_ts == T0 + UNPACED_SLICE_PS
    await asyncio.wait_for(gate.arrive(False), 10)  # the third: the round is over for all three
    await asyncio.wait_for(asyncio.gather(*first), 10)
    assert gate.limit_ts == T0 + 2 * UNPACED_SLICE_PS
    waiting = asyncio.create_task(gate.arrive(False))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not waiting.done()
    await gate.arrive(True)  # a sensor out of rows leaves: two are left, one of them waits
    assert not waiting.done()
    await asyncio.wait_for(gate.arrive(True), 10)  # the last other one leaves too: the waiting one goes on
    await asyncio.wait_for(waiting, 10)
    assert gate.limit_ts == T0 + 3 * UNPACED_SLICE_PS


async def test_an_unpaced_replay_steps_over_a_skipped_break_in_one_round() -> None:
    """Walked through in 50 ms slices, a generated match's ~39-minute break took every sensor ~46,000 rounds
    (an attached full-game replay stalled there for minutes)."""
    end1, start2 = HALF1[0] + 16 * PS, HALF2[0] - 5 * PS
    gate = EventTimeGate(HALF1[0], UNPACED_SLICE_PS, participants=2, gap=(end1, start2))
    limits = []
    while gate.limit_ts <= start2 + 3 * UNPACED_SLICE_PS:
        limits.append(gate.limit_ts)
        await asyncio.wait_for(asyncio.gather(gate.arrive(False), gate.arrive(False)), 10)
    assert not [limit for limit in limits if end1 < limit < start2]
    assert start2 in limits and limits == sorted(set(limits))
    assert len(limits) <= (end1 - HALF1[0]) // UNPACED_SLICE_PS + 5


async def test_without_a_break_to_skip_the_gate_moves_one_slice_a_round() -> None:
    gate = EventTimeGate(T0, UNPACED_SLICE_PS, participants=1)
    seen = [gate.limit_ts]
    for _ in range(3):
        await asyncio.wait_for(gate.arrive(False), 10)
        seen.append(gate.limit_ts)
    assert seen == [T0 + k * UNPACED_SLICE_PS for k in range(1, 5)]


def test_row_source_takes_every_row_up_to_the_limit_in_file_order() -> None:
    """``RowSource.take`` hands out exactly the rows with ts <= limit, at most ``max_rows`` at a time, across
    block boundaries and runs of equal ts, in file order: nothing skipped, nothing twice."""
    from simulator.sources import RowSource

    rnd = random.Random(7)
    ts, t = [], 0
    for _ in range(3000):
        t += rnd.choice((0, 0, 1, 5, 40))  # runs of equal ts, small and large steps
        ts.append(t)
    lines = [b"4,%d,%d\n" % (t, k) for k, t in enumerate(ts)]
    sizes = [rnd.randint(1, 300) for _ in range(40)]
    blocks, at = [], 0
    for size in sizes:
        if at < len(lines):
            blocks.append(lines[at : at + size])
            at += size
    blocks.append(lines[at:])
    source = RowSource("SENSOR4", iter([b"".join(b) for b in blocks if b]))
    taken: list[bytes] = []
    limit = 0
    while not source.exhausted or source.peek_ts() is not None:
        limit += rnd.randint(0, 400)
        max_rows = rnd.randint(1, 500)
        got_ts, got = source.take(limit, max_rows)
        assert len(got) <= max_rows and len(got_ts) == len(got)
        assert all(t <= limit for t in got_ts)
        expected_more = [t for t in ts[len(taken) + len(got):] if t <= limit]
        assert len(got) == max_rows or not expected_more  # it stops short only at the limit
        taken += got
    assert taken == lines


def test_row_source_hands_out_blocks_of_the_files_bytes_and_parses_only_what_a_bisection_looks_at() -> None:
    """``RowSource.take_block`` gives the same rows as ``take``, as slices of the file's bytes, with the newest ts.

    A malformed row that a bisection looks at makes the block parsed whole: that row is counted and dropped. One
    no bisection looks at goes out as it is (the receiver's ingest counts it), as a sensor's would.
    """
    from simulator.sources import RowSource

    rnd = random.Random(11)
    ts, t = [], 0
    for _ in range(3000):
        t += rnd.choice((0, 1, 5, 40))
        ts.append(t)
    lines = [b"4,%d,%d\n" % (t, k) for k, t in enumerate(ts)]
    cuts = sorted(rnd.sample(range(1, len(lines)), 30))
    blocks = [b"".join(lines[a:b]) for a, b in zip([0, *cuts], [*cuts, len(lines)], strict=True)]
    source = RowSource("SENSOR4", iter(blocks))
    data, sent, limit = b"", 0, 0
    while source.peek_ts() is not None:
        limit += rnd.randint(0, 400)
        max_rows = rnd.randint(1, 500)
        rows, newest, got = source.take_block(limit, max_rows)
        assert got.count(b"\n") == rows <= max_rows and (newest is None) == (rows == 0)
        if rows:
            assert newest == ts[sent + rows - 1] <= limit
        expected_more = [t for t in ts[sent + rows:] if t <= limit]
        assert rows == max_rows or not expected_more  # it stops short only at the limit
        data, sent = data + got, sent + rows
    assert data == b"".join(lines) and source.counts.malformed == 0

    looked_at = RowSource("SENSOR4", iter([b"4,1,a\n4,2,b\n4,x,c\n"]))  # the last row is the first looked at
    assert looked_at.take_block(10, 100) == (2, 2, b"4,1,a\n4,2,b\n") and looked_at.counts.malformed == 1
    passed_on = RowSource("SENSOR4", iter([b"4,1,a\n4,x,b\n4,3,c\n"]))
    assert passed_on.take_block(10, 100) == (3, 3, b"4,1,a\n4,x,b\n4,3,c\n") and passed_on.counts.malformed == 0
    every_ts = RowSource("SENSOR4", iter([b"4,1,a\n4,x,b\n4,3,c\n"]))  # ``take`` parses every row
    assert every_ts.take(10, 100) == ([1, 3], [b"4,1,a\n", b"4,3,c\n"]) and every_ts.counts.malformed == 1
