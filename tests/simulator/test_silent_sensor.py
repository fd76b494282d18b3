"""A sensor with nothing new to promise still says so now and then, so its receiver never takes it for idle.

Found in a loaded replay: a ball that was not in play had promised up to its next row and went quiet
while another stream went on; the forwarder declared it idle and promised for it the other stream's
progress, and 84 of the ball's rows then came behind that promise (late downstream).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from pan.http.addresses import free_port
from pan.ingest.server import IngestServer
from simulator.sensor_link import Link
from simulator.sensor_runner import PROMISE_REPEAT_S, SensorRunner
from simulator.simulate_summary import StreamStats
from simulator.sources import RowSource
from tests.conftest import HOST, wait_until

T0 = 10**15
PS = 10**12


async def test_a_silent_sensor_repeats_its_promise_when_it_cannot_move(tmp_path: Path) -> None:
    promised: list[dict[str, int]] = []
    server = IngestServer(HOST, free_port(), {"SENSOR4"}, deliver=lambda batches: None, on_promise=promised.append)
    await server.start()
    data = tmp_path / "SENSOR4.csv"
    data.write_bytes(b"4,%d,0,0,0,0,0,0,0,0,0,0,0\n" % (T0 + 10 * PS))  # the ball's only row, far ahead
    receiver = f"{HOST}:{server.port}"
    stats = StreamStats(receiver=receiver)
    link = Link("SENSOR4", HOST, server.port, stats, connect_timeout_s=30)
    options = cast(Any, type("Options", (), {"stop": None})())
    runner = SensorRunner("SENSOR4", RowSource.from_file("SENSOR4", data), link, stats, cast(Any, None), None,
                          options, None, frontier={receiver: T0})
    try:
        assert await link.ensure(force=True)
        limit = T0 + PS // 10  # the replay's event time does not move (e.g. during a skipped break)
        await runner._promise_if_silent(limit)
        await wait_until(lambda: len(promised) == 1, timeout_s=30)
        heard = server.streams["SENSOR4"].heard

        await runner._promise_if_silent(limit)  # nothing new, and said just now: nothing sent
        assert stats.promises == 1

        runner._heard_at -= PROMISE_REPEAT_S  # as if PROMISE_REPEAT_S of wall time had passed
        await runner._promise_if_silent(limit)
        assert stats.promises == 2
        await wait_until(lambda: server.streams["SENSOR4"].heard > heard, timeout_s=30)
        assert promised == [{"SENSOR4": limit}] * 2  # heard again: the same promise, nothing new
        assert server.counters.promises == 2 and server.counters.promises_refused == {}
    finally:
        await link.close()
        await server.stop()
