"""A closed connection is not the end of a stream (issue 11, item 1).

`pan simulate` drives a real forwarder over TCP; a ball sensor's `drop` outages
close its connection and reconnect. Ordering units behind the forwarder must
take the reconnect as a pause: no row late or lost, K as before. The end of
the data is said explicitly (an end promise per sensor) and flows through the
ordering units, so the last rows come out without any wall-clock rule.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from pan.config.specs import WorkflowError
from pan.ingest.lines import END_OF_STREAM
from pan.ordering.settings import OrderingSettings
from pan.repository.server import RepositoryServer
from pan.worker.worker import Worker
from simulator.impair import ImpairProfile
from simulator.simulate import simulate
from simulator.simulate_options import SimulateOptions
from tests.conftest import HOST, WorkerGroup, forwarder, free_port, get_json, make_workflow, wait_until
from tests.simulator.split_folders import T0, rate_rows, write_split

SECONDS = 3.0
#: Two outages of the ball sensor (event seconds after the first row): its connection is closed at the
#: first packet due inside each, every row due inside is lost, and the next row after it reconnects.
OUTAGES_S = [[0.6, 0.9], [1.5, 1.6]]


def merge(name: str, output: str, **params: Any) -> dict[str, Any]:
    return {"name": name, "type": "merge", "host": HOST, "port": free_port(), "inputs": ["SENSOR4", "SENSOR13"],
            "params": {"output": output, **params}}


def rows_of(worker: Worker, stream: str) -> list[tuple[int, int]]:
    """(ts, sid) of every tuple the worker published on ``stream``."""
    items = worker.outputs[stream].buffer.read(-1, oldest=1_000_000).items
    return [(t["ts"], t["sid"]) for t in map(orjson.loads, items)]


async def ordering_of(worker: Worker) -> dict[str, Any]:
    _, info = await get_json(f"http://{HOST}:{worker.server.port}/streams")
    return info["component"]["ordering"]


async def test_a_sensor_that_reconnects_resumes_its_stream(
    repository: RepositoryServer, workers: WorkerGroup, tmp_path: Path
) -> None:
    data = write_split(tmp_path / "split", {4: rate_rows(T0, SECONDS, 2000), 13: rate_rows(T0 + 1, SECONDS, 200)})
    profile = ImpairProfile.from_dict(
        {"seed": 3, "profiles": {"ball": {"outages": {"windows_s": OUTAGES_S, "mode": "drop"}}}}
    )
    workflow = make_workflow(repository.port, [
        forwarder("F", ["SENSOR4", "SENSOR13"], buffer_size=20_000),
        merge("W", "XW", clock_mode="watermark"),
        merge("M", "XM", clock_mode="max", initial_k=200 * 10**9, **{"lambda": 1.0}),  # covers scheduling
            # delays of a loaded machine until K has learnt them (20 ms gave 0.67% late at load 20)
    ])
    fwd, watermark, maxmode = await workers.start(workflow)
    summary = await simulate(SimulateOptions(workflow, data, speedup=2.0, impair=profile))
    ball = summary.streams["SENSOR4"]
    assert ball.connects == 1 + len(OUTAGES_S)  # each outage closed the connection, the next row reconnected
    assert ball.lost_outage > 0 and ball.lost == ball.lost_outage and summary.streams["SENSOR13"].lost == 0
    sent = ball.sent + summary.streams["SENSOR13"].sent

    async def all_in(worker: Worker) -> bool:
        info = await ordering_of(worker)
        return info["pushed"] == sent and info["buffered"] == 0

    # The end of the data flows through: everything leaves the units, without a wall-clock rule.
    await wait_until(lambda: all_in(watermark), timeout_s=60)
    # Watermark mode: every row, in order, none late, and K never moved (the streams are in order).
    info = await ordering_of(watermark)
    assert info["late"] == 0 and info["k"] == 0
    merged = rows_of(watermark, "XW")
    assert len(merged) == sent and merged == sorted(merged, key=lambda r: (r[0], r[1] != 4))

    # The forwarder kept the stream open over the reconnects; only the end promise ended it.
    assert ball.ended and summary.streams["SENSOR13"].ended  # said once the data was exhausted
    assert fwd.outputs["SENSOR4"].progress.wm == END_OF_STREAM
    await wait_until(lambda: watermark.outputs["XW"].progress.wm == END_OF_STREAM, timeout_s=30)
    counters = fwd.component.counters()
    assert counters["promises_refused"] == {} and counters["idle_declared"] == 0

    # Max mode: the end flushes it too, and K stays far below max_k (10 s), where an end taken as
    # progress used to push it. K itself follows the machine's scheduling delays (it reached 809 ms at
    # load 12-19, where a bound of 500 ms failed), so only a K near max_k is blamed on the end. Every row
    # is accounted for: released in order or counted late. How many come late depends on how the machine
    # schedules the reconnecting sender (it was 0-66 of 11,000 rows at load 1-20), so that share is
    # measured by `pan bench ordering-modes`, not bounded here.
    await wait_until(lambda: all_in(maxmode), timeout_s=30)
    info = await ordering_of(maxmode)
    assert info["k"] < OrderingSettings().max_k // 2
    assert info["released"] + info["late"] == sent
    merged = rows_of(maxmode, "XM")
    assert merged == sorted(merged, key=lambda r: (r[0], r[1] != 4))


def test_the_wall_clock_idle_timeout_is_refused_with_the_reason() -> None:
    with pytest.raises(WorkflowError, match=r"params.idle_timeout: removed.*idle_after_ms"):
        make_workflow(free_port(), [
            forwarder("F", ["SENSOR4", "SENSOR13"]), merge("W", "XW", clock_mode="watermark", idle_timeout=5.0)
        ])
