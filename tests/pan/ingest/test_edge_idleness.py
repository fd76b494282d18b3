"""Idleness is declared at the edge only; inside the network nothing decides on wall time (issue 11, item 9).

- The ingest server declares a sensor idle after ``idle_after_ms`` without a
  row or promise while other sensors go on, and promises for it the slowest
  active progress (Flink's idle sources). Its timers are driven explicitly
  here (``check_idle(now)``), so these tests do not depend on the machine's speed.
- An ordered worker whose upstream process is stopped (SIGSTOP) for longer
  than the old wall-clock idle timeout waits for it and gives exactly the
  output of an undisturbed run: real processes, real TCP and HTTP.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from pan.ingest.lines import END_OF_STREAM, promise_line
from pan.ingest.server import IngestServer
from pan.ingest.settings import IngestSettings
from pan.ingest.streams import Connection
from pan.ordering.picoseconds import PS_PER_MS
from pan.repository.server import RepositoryServer
from simulator.debs_rows import DebsCsvDecoder
from simulator.simulate import simulate
from simulator.simulate_options import SimulateOptions
from tests.conftest import HOST, Processes, WorkerGroup, forwarder, free_port, make_workflow, wait_until, workflow_dict
from tests.pan.input.publishers import answer
from tests.simulator.split_folders import PS, T0, rate_rows, write_split

MS = PS_PER_MS


def row(sid: int, ts: int) -> bytes:
    return b"%d,%d,0,0,0,0,0,0,0,0,0,0,0" % (sid, ts)


class Edge:
    """An ingest server without sockets: lines go in through ``feed``, promises come out in ``made``."""

    def __init__(self, streams: list[str], idle_after_ms: int = 1000) -> None:
        self.made: list[dict[str, int]] = []
        self.rows: dict[str, list[Any]] = {}
        self.server = IngestServer(
            HOST, 0, set(streams), self._deliver, self.made.append,
            IngestSettings(idle_after_ms=idle_after_ms, decoder=DebsCsvDecoder),
        )
        self.sender = Connection("sensor")  # one sender for every sensor, as `pan simulate` per sensor

    def _deliver(self, batches: dict[str, list[Any]]) -> None:
        for stream, rows in batches.items():
            self.rows.setdefault(stream, []).extend(rows)

    def feed(self, *lines: bytes) -> None:
        self.server._deliver_lines(list(lines), self.sender)

    def check(self, now: float) -> dict[str, int]:
        return self.server.check_idle(now)


def test_a_silent_sensor_is_declared_idle_and_promised_the_slowest_active_progress() -> None:
    edge = Edge(["SENSOR4", "SENSOR8", "SENSOR13"])
    t0 = time.monotonic()
    edge.feed(row(4, 100 * MS), row(8, 90 * MS), row(13, 95 * MS))
    assert edge.check(t0 + 0.5) == {}  # nobody silent for 1 s yet
    edge.server.streams["SENSOR4"].heard = edge.server.streams["SENSOR8"].heard = t0 + 0.9  # 4 and 8 go on
    edge.feed(row(4, 200 * MS), row(8, 180 * MS))
    for name in ("SENSOR4", "SENSOR8"):
        edge.server.streams[name].heard = t0 + 0.9
    # SENSOR13 silent since t0: idle at t0 + 1 s; promised the slowest active progress (SENSOR8, 180 ms).
    assert edge.check(t0 + 1.2) == {"SENSOR13": 180 * MS}
    counters = edge.server.counters
    assert counters.idle_declared == 1 and counters.idle_promises == 1
    assert edge.check(t0 + 1.3) == {}  # nothing new to promise
    # It comes back with a row older than the promise: delivered (late downstream), counted here.
    edge.feed(row(13, 170 * MS), row(13, 185 * MS))
    assert [r[1] for r in edge.rows["SENSOR13"]] == [95 * MS, 170 * MS, 185 * MS]
    assert counters.behind_promise == 1 and not edge.server.streams["SENSOR13"].idle


def test_a_pause_of_every_sensor_is_not_idleness() -> None:
    """Half-time break, a stopped simulator: with no active stream nothing is promised."""
    edge = Edge(["SENSOR4", "SENSOR8"])
    t0 = time.monotonic()
    edge.feed(row(4, 100 * MS), row(8, 50 * MS))
    assert edge.check(t0 + 5.0) == {} and edge.made == []
    assert edge.server.counters.idle_declared == 2
    # Play resumes with one sensor first: every timer restarts, the other is not taken for idle at once.
    edge.feed(row(4, 110 * MS))
    assert edge.check(time.monotonic() + 0.5) == {}


def test_a_sensor_never_heard_of_is_promised_only_after_idle_after_ms() -> None:
    edge = Edge(["SENSOR4", "SENSOR8"])
    edge.feed(row(4, 100 * MS))  # the first row starts everyone's timer
    start = edge.server.streams["SENSOR8"].heard
    edge.feed(promise_line("SENSOR4", 150 * MS))  # a keep-alive: SENSOR4 has come to 150 ms
    edge.server.streams["SENSOR4"].heard = start + 1.5
    assert edge.check(start + 0.5) == {}
    assert edge.check(start + 1.1) == {"SENSOR8": 150 * MS}


def test_ended_streams_and_promise_senders() -> None:
    """An ended stream is never idle; while the carrier is open nobody else promises; after it closed, anyone."""
    edge = Edge(["SENSOR4", "SENSOR8"])
    edge.feed(row(4, 100 * MS), promise_line("SENSOR8", END_OF_STREAM))
    assert edge.made == [{"SENSOR8": END_OF_STREAM}]
    later = time.monotonic() + 10
    edge.server.streams["SENSOR4"].heard = later
    assert edge.check(later + 0.1) == {}  # SENSOR8 ended: no idle promise for it
    assert edge.server.counters.idle_declared == 0


@pytest.mark.parametrize("value", [-1, 1.5, "5000"])
def test_idle_after_ms_is_checked(value: object) -> None:
    from pan.ingest.settings import parse_ingest_params

    _settings, problems = parse_ingest_params({"idle_after_ms": value}, ["SENSOR4"])
    assert problems and problems[0].startswith("idle_after_ms:")
    settings, problems = parse_ingest_params({"idle_after_ms": 0}, ["SENSOR4"])
    assert problems == [] and settings.idle_after_ms == 0


# --- real processes: a stopped upstream is waited for ------------------------------------------------

SECONDS = 6.0
HZ = 100
PAUSE_S = 3.5  # longer than the old wall-clock idle timeout (2 s by default)


def load_workflow(repo_port: int) -> dict[str, Any]:
    """F (this process) receives two sensors; U (peer "mid") re-publishes one; M (peer "sink") merges."""
    return workflow_dict(repo_port, [
        forwarder("F", ["SENSOR4", "SENSOR13"], peer="src", buffer_size=20_000),
        {"name": "U", "type": "merge", "host": HOST, "port": free_port(), "peer": "mid", "inputs": ["SENSOR13"],
         "params": {"output": "P", "clock_mode": "watermark"}},
        {"name": "M", "type": "merge", "host": HOST, "port": free_port(), "peer": "sink",
         "inputs": ["SENSOR4", "P"], "params": {"output": "X", "clock_mode": "watermark"}},
    ])


async def feed_in_real_time(port: int, stop: asyncio.Event | None = None) -> list[tuple[int, int]]:
    """Both sensors at HZ for SECONDS of event time, paced on the wall clock, then their end promises."""
    _reader, writer = await asyncio.open_connection(HOST, port)
    sent: list[tuple[int, int]] = []
    started = time.monotonic()
    n, total = 0, int(SECONDS * HZ)
    try:
        while n < total:
            due = min(total, int((time.monotonic() - started) * HZ) + 1)
            lines = []
            for k in range(n, due):
                ts = 10**15 + k * (1000 * MS // HZ)
                for sid in (4, 13):
                    lines.append(row(sid, ts + sid))
                    sent.append((ts + sid, sid))
            writer.write(b"\n".join(lines) + b"\n")
            await writer.drain()
            n = due
            await asyncio.sleep(0.01)
        writer.write(promise_line("SENSOR4") + b"\n" + promise_line("SENSOR13") + b"\n")
        await writer.drain()
    finally:
        writer.close()
    return sent


@pytest.mark.slow
async def test_a_stopped_upstream_process_is_waited_for(
    repository: RepositoryServer, workers: WorkerGroup, processes: Processes
) -> None:
    data = load_workflow(repository.port)
    path = processes.write_workflow(data)
    (fwd,) = await workers.start(make_workflow(repository.port, data["workers"]), names=["F"])
    mid = processes.pan("peer", str(path), "--name", "mid", log_name="mid")
    processes.pan("peer", str(path), "--name", "sink", log_name="sink")
    sink_url = f"http://{HOST}:{data['workers'][2]['port']}"
    mid_url = f"http://{HOST}:{data['workers'][1]['port']}"
    await wait_until(lambda: answer(f"{mid_url}/health"), timeout_s=60)
    await wait_until(lambda: answer(f"{sink_url}/health"), timeout_s=60)

    async def pause_mid() -> float:
        """SIGSTOP the process of U (M's upstream for SENSOR13's rows) for PAUSE_S while the feed goes on."""
        await wait_until(lambda: fwd.outputs["SENSOR13"].buffer.last >= HZ, timeout_s=30)
        os.kill(mid.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            await asyncio.sleep(PAUSE_S)  # the disturbance itself, not a wait for a condition
        finally:
            os.kill(mid.pid, signal.SIGCONT)
        return time.monotonic() - stopped

    sent, paused_s = await asyncio.gather(feed_in_real_time(fwd.spec.params["ingest_port"]), pause_mid())
    assert paused_s >= PAUSE_S

    async def sink_done() -> dict[str, Any] | None:
        info = await answer(f"{sink_url}/streams")
        ordering = info["component"]["ordering"] if info else None
        done = ordering and ordering["pushed"] == len(sent) and ordering["buffered"] == 0
        return ordering if done else None

    ordering = await wait_until(sink_done, timeout_s=90)
    assert ordering["late"] == 0 and ordering["k"] == 0
    page = await answer(f"{sink_url}/data", s="X", i=-1, n=100_000)
    assert page is not None
    merged = [(t["ts"], t["sid"]) for t in page["tuples"]]
    # Exactly what an undisturbed run gives: the two streams merged in ts order, nothing late.
    assert merged == sorted(sent)
    late = await answer(f"{sink_url}/data", s="X_late", i=-1, n=10)
    assert late is not None and late["tuples"] == []

    async def output_ended() -> bool:
        body = await answer(f"{sink_url}/data", s="X", l=1)
        return bool(body and body["meta"].get("wm") == END_OF_STREAM)

    await wait_until(output_ended, timeout_s=10)  # the end travelled through U and M as a promise


# --- the simulator promises for its silent sensors ------------------------------------------------------


@pytest.mark.parametrize("silent_from_s", [1, 0], ids=["gap", "late_start"])
async def test_the_simulator_promises_for_a_sensor_silent_in_event_time(
    repository: RepositoryServer, workers: WorkerGroup, tmp_path: Path, silent_from_s: int
) -> None:
    """A 3 s gap in the ball's data (like the real file's first-half gap), or a ball that comes into play
    only after 4 s: the output goes on while the ball sends nothing.

    The forwarder's own idle timer is set far beyond the run, so only the simulator's promises can move
    the watermark past the ball while it sends nothing, also before its first row.
    """
    ball = [t for t in rate_rows(T0, 5.0, 2000) if not T0 + silent_from_s * PS <= t < T0 + 4 * PS]
    data = write_split(tmp_path / "split", {4: ball, 13: rate_rows(T0 + 1, 5.0, 200)})
    workflow = make_workflow(repository.port, [
        forwarder("F", ["SENSOR4", "SENSOR13"], buffer_size=20_000, params={"idle_after_ms": 600_000}),
        {"name": "W", "type": "merge", "host": HOST, "port": free_port(), "inputs": ["SENSOR4", "SENSOR13"],
         "params": {"output": "X", "clock_mode": "watermark"}},
    ])
    fwd, merge = await workers.start(workflow)
    feed = asyncio.create_task(simulate(SimulateOptions(workflow, data, speedup=2.0)))

    def released_in_gap() -> bool:
        page = merge.outputs["X"].buffer.read(-1, latest=1)
        newest = orjson.loads(page.items[0])["ts"] if page.items else 0
        return newest > T0 + 2 * PS

    try:
        await wait_until(released_in_gap, timeout_s=30)
        ball_sent = fwd.outputs["SENSOR4"].buffer.read(-1, latest=1).items
        assert not ball_sent or orjson.loads(ball_sent[0])["ts"] < T0 + 4 * PS  # the ball is still silent
    finally:
        summary = await feed
    assert summary.streams["SENSOR4"].promises > 0 and summary.streams["SENSOR4"].ended
    await wait_until(lambda: merge.outputs["X"].progress.wm == END_OF_STREAM, timeout_s=30)
    assert merge.outputs["X"].appended == len(ball) + 1000 and merge.outputs["X_late"].appended == 0
    counters = fwd.component.counters()
    assert counters["idle_declared"] == 0 and counters["promises_refused"] == {}
