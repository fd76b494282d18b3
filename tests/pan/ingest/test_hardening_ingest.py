"""Issue 10, ingest side: typed rows (finding 2), checked promises (4), byte budgets (6), connection limits (7).

Every test talks to a real forwarder over real TCP and reads it back over HTTP,
the way senders and subscribers do.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pan.buffers.streams import OutputStream
from pan.config.specs import WorkflowError
from pan.http.web import free_port
from pan.ingest.lines import END_OF_STREAM, promise_line
from pan.ingest.server import send_lines
from pan.repository.server import RepositoryServer
from pan.wire.progress import EMPTY
from pan.worker.worker import Worker
from pan.workflow.parser import parse_workflow
from simulator.sources import interruption_lines
from tests.conftest import (
    WorkerGroup,
    forwarder,
    get_json,
    make_workflow,
    sensor_row,
    wait_until,
    workflow_dict,
)
from tests.support import prometheus

EVENTS_SCHEMA = {"fields": {"event": "str", "n": {"type": "int", "required": False}}}
PS_PER_MS = 10**9


async def start_forwarder(repository: RepositoryServer, workers: WorkerGroup, **extra: Any) -> Worker:
    spec = forwarder("F", ["SENSOR4", "SENSOR8", "INTERRUPTIONS", "EVENTS"], **extra)
    (started,) = await workers.start(make_workflow(repository.port, [spec]))
    return started


@pytest.fixture
async def fwd(repository: RepositoryServer, workers: WorkerGroup) -> Worker:
    return await start_forwarder(repository, workers, params={"schemas": {"EVENTS": EVENTS_SCHEMA}})


def counters(worker: Worker) -> dict[str, Any]:
    return worker.component.counters()


def held(worker: Worker, stream: str) -> list[bytes]:
    return worker.outputs[stream].buffer.read(-1, oldest=100_000).items


async def send(worker: Worker, lines: list[bytes]) -> None:
    assert worker.spec.params["ingest_port"] is not None
    await send_lines("127.0.0.1", worker.spec.params["ingest_port"], lines)


async def connect(worker: Worker) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    async with asyncio.timeout(10):
        return await asyncio.open_connection("127.0.0.1", worker.spec.params["ingest_port"])


async def data_page(worker: Worker, stream: str, after: int = -1) -> dict[str, Any]:
    """`/data` over HTTP, decoded the way every subscriber decodes it."""
    status, body = await get_json(f"http://127.0.0.1:{worker.server.port}/data", s=stream, i=after)
    assert status == 200 and isinstance(body, dict), body
    return body


def json_row(stream: str, **fields: Any) -> bytes:
    """A JSON line; the standard library writes integers of any size, as a hostile sender can."""
    return json.dumps({"stream": stream, **fields}, separators=(",", ":")).encode()


def sensor_fields(sid: int, ts: int) -> dict[str, int]:
    names = ("sid", "ts", "x", "y", "z", "v", "a", "vx", "vy", "vz", "ax", "ay", "az")
    return dict(zip(names, map(int, sensor_row(sid, ts).split(",")), strict=True))


def assert_prometheus_text(text: str) -> None:
    """Prometheus's own parser accepts it, and no metric name carries a stream (streams are labels)."""
    for sample in prometheus.samples(text):
        assert "SENSOR" not in sample.name, sample


# --- finding 2: typed validation at ingest --------------------------------------------


async def test_a_csv_integer_beyond_64_bits_is_refused_and_the_stream_stays_readable(fwd: Worker) -> None:
    """The issue's poison row: before, it was stored and no reader could decode its page ever again."""
    await send(fwd, [
        sensor_row(8, 100).encode(),
        b"8,1," + b"9" * 400 + b",0,0,0,0,0,0,0,0,0,0",
        b"8,%d,0,0,0,0,0,0,0,0,0,0,0" % 2**200,  # ts
        b"8,102,0,0,0,0,0,0,0,0,0,0,%d" % 2**63,  # just beyond int64
        b"8,-5,0,0,0,0,0,0,0,0,0,0,0",  # ts before 0
        b"8,%d,0,0,0,0,0,0,0,0,0,0,0" % END_OF_STREAM,  # ts at the end of time
        b"8,103,0,0,0,0,0,0,0,0,0,0,%d" % -(2**63),  # int64's minimum is an int64
    ])
    await wait_until(lambda: counters(fwd)["rows"] == 2 and sum(counters(fwd)["rejected"].values()) == 5)
    assert counters(fwd)["rejected"] == {"not_int64": 3, "ts_out_of_range": 2}
    page = await data_page(fwd, "SENSOR8")
    assert [t["ts"] for t in page["tuples"]] == [100, 103] and page["missed"] == 0


@pytest.mark.parametrize(
    "field", [b" 5", b"+5", b"1_000", "\u0665".encode(), b"5 ", b"0x5", b"--5", b""], ids=repr
)
async def test_csv_integers_are_plain_ascii_digits(fwd: Worker, field: bytes) -> None:
    """int() alone also reads padded, signed, underscored and non-ASCII digits: such a row is malformed."""
    await send(fwd, [b"8,100,0,0,0,0,0,0,0,0,0,0," + field, sensor_row(8, 101).encode()])
    await wait_until(lambda: counters(fwd)["rows"] == 1 and counters(fwd)["malformed"] == 1)
    page = await data_page(fwd, "SENSOR8")
    assert [t["ts"] for t in page["tuples"]] == [101]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"ts": -5}, "ts_out_of_range"),
        ({"x": "evil"}, "wrong_type"),
        ({"sid": "not-a-number"}, "wrong_type"),
        ({"v": []}, "wrong_type"),
        ({"v": 2.5}, "wrong_type"),
        ({"x": 2**64 - 1}, "not_int64"),
        ({"x": 2**200}, "not_int64"),  # orjson reads an integer beyond 64 bits as a float
        ({"ts": 2**200}, "not_int64"),
        ({"sid": 5}, "stream_mismatch"),  # a CSV row of sensor 5 could never reach SENSOR4
        ({"extra": 1}, "unknown_field"),
        ({"promise": "yes"}, "wrong_type"),
    ],
)
async def test_a_json_row_into_a_csv_stream_obeys_the_csv_layout(fwd: Worker, change: dict, reason: str) -> None:
    await send(fwd, [json_row("SENSOR4", **{**sensor_fields(4, 7), **change}), sensor_row(4, 8).encode()])
    await wait_until(lambda: counters(fwd)["rows"] == 1 and counters(fwd)["rejected"])
    assert counters(fwd)["rejected"] == {reason: 1}
    assert [t["ts"] for t in (await data_page(fwd, "SENSOR4"))["tuples"]] == [8]


async def test_a_json_row_with_the_csv_layout_is_stored_like_the_csv_row(fwd: Worker) -> None:
    missing = sensor_fields(4, 3)
    del missing["az"]
    await send(fwd, [
        json_row("SENSOR4", i=999, **sensor_fields(4, 1)),  # "i" is the producer's, never the sender's
        sensor_row(4, 1).encode(),
        json_row("SENSOR4", **missing),
    ])
    await wait_until(lambda: counters(fwd)["rows"] == 2 and counters(fwd)["rejected"])
    first, second = held(fwd, "SENSOR4")
    assert first.replace(b'"i":0', b'"i":1') == second  # same bytes but for the index
    assert counters(fwd)["rejected"] == {"missing_field": 1}


async def test_the_simulators_interruptions_lines_are_valid_and_hostile_ones_are_not(fwd: Worker) -> None:
    """A stream without a declared schema takes ts plus JSON scalars, as the simulator sends them."""
    good = interruption_lines(None, (10**12, 10**12 + 5 * 10**10, 10**10))
    good += [json_row("INTERRUPTIONS", ts=7, f=1.5, b=True, z=None, s="x" * 4096, big=-(2**63))]
    bad = [
        json_row("INTERRUPTIONS", ts=8, event={"nested": 1}),
        json_row("INTERRUPTIONS", ts=9, event=[1]),
        json_row("INTERRUPTIONS", ts=10, event="x" * 4097),
        json_row("INTERRUPTIONS", ts=11, n=2**64 - 1),  # still an integer to orjson, but beyond int64
        json_row("INTERRUPTIONS", ts=2**62),
        b'{"stream":"INTERRUPTIONS","ts":1.0e30}',
        b'{"stream":"INTERRUPTIONS","ts":12.5}',
    ]
    await send(fwd, good + bad)
    await wait_until(lambda: counters(fwd)["rows"] == len(good) and sum(counters(fwd)["rejected"].values()) == 7)
    assert counters(fwd)["rejected"] == {
        "nested_value": 2, "string_too_long": 1, "not_int64": 2, "ts_out_of_range": 1, "wrong_type": 1
    }
    assert len((await data_page(fwd, "INTERRUPTIONS"))["tuples"]) == len(good)


async def test_a_declared_schema_is_enforced(fwd: Worker) -> None:
    await send(fwd, [
        json_row("EVENTS", ts=1, event="kick"),
        json_row("EVENTS", ts=2, event="kick", n=3),
        json_row("EVENTS", ts=3),  # event is required
        json_row("EVENTS", ts=4, event=5),
        json_row("EVENTS", ts=5, event="kick", n=1.5),
        json_row("EVENTS", ts=6, event="kick", other=1),  # extra is off by default
    ])
    await wait_until(lambda: counters(fwd)["rows"] == 2 and sum(counters(fwd)["rejected"].values()) == 4)
    assert counters(fwd)["rejected"] == {"missing_field": 1, "wrong_type": 2, "unknown_field": 1}
    assert [t["ts"] for t in (await data_page(fwd, "EVENTS"))["tuples"]] == [1, 2]


def test_forwarder_params_are_validated_and_every_problem_is_named() -> None:
    spec = forwarder("F", ["SENSOR4", "EVENTS"], params={
        "schemas": {
            "EVENTS": {"fields": {"event": "text", "ts": "int", "n": {"type": "int", "required": "no"}}, "x": 1},
            "SENSOR4": {"fields": {}},
            "NOBODY": {"fields": {}},
        },
        "max_row_bytes": 10**9,
        "promise_ahead_ms": -1,
        "idle_timeout_s": 0,
        "max_connections_per_address": True,
        "colour": "red",
    })
    with pytest.raises(WorkflowError) as error:
        parse_workflow(workflow_dict(1, [spec]))
    text = "\n".join(error.value.problems)
    for expected in [
        "params.schemas.EVENTS.fields.event.type: must be one of int, number, str, bool, scalar",
        "params.schemas.EVENTS.fields.ts: 'ts' is reserved",
        "params.schemas.EVENTS.fields.n.required: must be true or false",
        "params.schemas.EVENTS: unknown key 'x'",
        "params.schemas.SENSOR4: 'SENSOR4' receives CSV rows",
        "params.schemas.NOBODY: 'NOBODY' is not one of this worker's inter_pan_inputs",
        "params.max_row_bytes: must be an integer in 64..65536",
        "params.promise_ahead_ms: must be an integer",
        "params.idle_timeout_s: must be a number of seconds",
        "params.max_connections_per_address: must be an integer",
        "params.colour: unknown key",
    ]:
        assert expected in text
    assert len(error.value.problems) == 11


async def test_rejections_are_in_streams_and_metrics_and_logged_with_a_rate_limit(
    fwd: Worker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pan.ingest.server")
    await send(fwd, [b"4,%d,0,0,0,0,0,0,0,0,0,0,0" % -n for n in range(1, 201)])
    await wait_until(lambda: counters(fwd)["rejected"].get("ts_out_of_range") == 200)
    logged = [r for r in caplog.records if r.name == "pan.ingest.server"]
    assert len(logged) == 10  # one window's burst (pan.util.ratelimit.LOG_BURST), not 200
    _, info = await get_json(f"http://127.0.0.1:{fwd.server.port}/streams")
    assert info["component"]["rejected"] == {"ts_out_of_range": 200}
    _, text = await get_json(f"http://127.0.0.1:{fwd.server.port}/metrics")
    assert_prometheus_text(text)
    assert prometheus.value(text, "pan_component_rejected", worker="F", key="ts_out_of_range") == 200


def test_the_log_limit_is_a_time_window_not_a_lifetime_budget(caplog: pytest.LogCaptureFixture) -> None:
    from pan.util.ratelimit import RateLimitedLog

    now = [0.0]
    limited = RateLimitedLog(logging.getLogger("test.ratelimit"), burst=3, window_s=10.0, clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger="test.ratelimit")
    assert [limited.warning("bad %d", n) for n in range(5)] == [True, True, True, False, False]
    now[0] = 10.0  # a new window: logged again, after a line saying how many were left out
    assert limited.warning("bad again") is True
    assert [r.getMessage() for r in caplog.records] == [
        "bad 0", "bad 1", "bad 2", "2 similar messages suppressed in the last 10 s", "bad again"
    ]


# --- finding 4: promises are checked ------------------------------------------------


async def test_a_forged_promise_from_another_connection_is_refused(fwd: Worker) -> None:
    """The issue's attack: 2^62 promised for a live stream by someone who does not carry it."""
    _reader, sensor = await connect(fwd)
    try:
        sensor.write(b"".join(sensor_row(4, ts).encode() + b"\n" for ts in range(10)))
        await sensor.drain()
        await wait_until(lambda: counters(fwd)["rows"] == 10)
        await send(fwd, [promise_line("SENSOR4", 2**62), promise_line("SENSOR4", 5 * 10**12)])
        await wait_until(lambda: counters(fwd)["promises_refused"].get("not_sender") == 2)
        assert fwd.outputs["SENSOR4"].progress.wm is None
        sensor.write(sensor_row(4, 10).encode() + b"\n")  # the real sensor goes on
        await sensor.drain()
        await wait_until(lambda: counters(fwd)["rows"] == 11)
    finally:
        sensor.close()
    # Its clean close ends nothing (a reconnect resumes the stream); once it is closed, the
    # sensor's next connection may promise, here its end.
    await wait_until(lambda: counters(fwd)["open_connections"] == 0)
    assert fwd.outputs["SENSOR4"].progress.wm is None
    await send(fwd, [promise_line("SENSOR4")])
    await wait_until(lambda: fwd.outputs["SENSOR4"].progress.wm == END_OF_STREAM)


async def test_the_sender_may_promise_within_its_bound_or_the_end(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    worker = await start_forwarder(repository, workers, params={"promise_ahead_ms": 1000})
    base = 10**15
    _reader, sensor = await connect(worker)
    try:
        sensor.write(sensor_row(4, base).encode() + b"\n" + promise_line("SENSOR4", base + 1000 * PS_PER_MS) + b"\n")
        await sensor.drain()
        await wait_until(lambda: worker.outputs["SENSOR4"].progress.wm == base + 1000 * PS_PER_MS)
        sensor.write(promise_line("SENSOR4", base + 1000 * PS_PER_MS + 1) + b"\n")
        await sensor.drain()
        await wait_until(lambda: counters(worker)["promises_refused"] == {"too_far_ahead": 1})
        sensor.write(promise_line("SENSOR4") + b"\n")  # the end: it could as well have closed
        await sensor.drain()
        await wait_until(lambda: worker.outputs["SENSOR4"].progress.wm == END_OF_STREAM)
        assert counters(worker)["promises"] == 2
    finally:
        sensor.close()


async def test_a_stream_without_data_may_still_be_promised_its_end(fwd: Worker) -> None:
    """What `pan simulate` and `pan replay` send for sensors the data set has no rows for."""
    await send(fwd, [promise_line("SENSOR8")])
    await wait_until(lambda: fwd.outputs["SENSOR8"].progress.wm == END_OF_STREAM)
    assert counters(fwd)["promises"] == 1 and counters(fwd)["promises_refused"] == {}


async def test_hostile_values_never_make_streams_or_metrics_fail(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    """Before, a promise beyond int64 became the stream's watermark (in the issue, `/streams` then answered 500).

    A merge downstream sees whatever gets through, so its endpoints are checked too.
    """
    fwd, merger = await workers.start(make_workflow(repository.port, [
        forwarder("F", ["SENSOR4", "SENSOR8", "INTERRUPTIONS"]),
        {"name": "M", "type": "merge", "host": "127.0.0.1", "port": free_port(), "inputs": ["SENSOR4", "SENSOR8"],
         "params": {"output": "X", "clock_mode": "watermark"}},
    ]))
    hostile = [
        b'{"stream":"SENSOR8","ts":18446744073709551615,"promise":true}',
        b'{"stream":"SENSOR8","ts":%d,"promise":true}' % 2**200,
        b'{"stream":"SENSOR8","ts":-1,"promise":true}',
        b'{"stream":"SENSOR8","ts":"soon","promise":true}',
        b'{"stream":"INTERRUPTIONS","ts":1,"x":18446744073709551615}',
        b'{"stream":"INTERRUPTIONS","ts":1,"x":1e308,"y":-1e308}',
        b'{"stream":"INTERRUPTIONS","ts":1,"\\u0000\\n\\"":"\\ud800"}',
        b"8,1," + b"9" * 4000 + b",0,0,0,0,0,0,0,0,0,0",
        b"4,18446744073709551615,0,0,0,0,0,0,0,0,0,0,0",
        bytes(range(256)),
        sensor_row(4, 5).encode(),  # the last line: once it is in, every line before it was handled
    ]
    await send(fwd, hostile)
    await wait_until(lambda: counters(fwd)["per_stream"].get("SENSOR4", 0) >= 1)
    await wait_until(lambda: merger.inputs["SENSOR4"].buffer.last == 0)
    for worker in (fwd, merger):
        status, info = await get_json(f"http://127.0.0.1:{worker.server.port}/streams")
        assert status == 200 and isinstance(info, dict) and info["status"] == "ok"
        status, text = await get_json(f"http://127.0.0.1:{worker.server.port}/metrics")
        assert status == 200 and isinstance(text, str)
        assert_prometheus_text(text)
    assert fwd.outputs["SENSOR8"].progress.wm is None and counters(fwd)["per_stream"]["SENSOR4"] == 1
    for stream in ("SENSOR4", "SENSOR8", "INTERRUPTIONS"):
        await data_page(fwd, stream)  # decodes
    assert counters(fwd)["promises_refused"] == {"not_int64": 2, "ts_out_of_range": 1}  # "soon": malformed


# --- finding 6: byte budget -----------------------------------------------------------


async def test_large_rows_are_bounded_in_bytes_and_readers_see_what_was_dropped(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    budget = 200_000
    worker = await start_forwarder(repository, workers, buffer_bytes=budget, params={"max_row_bytes": 16_384})
    pad = {f"p{k}": "x" * 2500 for k in range(4)}  # strings are bounded too (pan.ingest.schema.MAX_STRING_CHARS)
    rows = [json_row("INTERRUPTIONS", ts=n, **pad) for n in range(100)]  # ~10 KB each, ~1 MB in all
    await send(worker, [*rows, json_row("INTERRUPTIONS", ts=100, **pad, **{k + "b": v for k, v in pad.items()})])
    await wait_until(lambda: counters(worker)["rows"] == 100 and counters(worker)["rejected"])
    assert counters(worker)["rejected"] == {"row_too_large": 1} and counters(worker)["oversized"] == 0
    output = worker.outputs["INTERRUPTIONS"]
    assert output.held_bytes == sum(map(len, held(worker, "INTERRUPTIONS")))
    assert budget - 10_100 < output.held_bytes <= budget
    assert output.buffer.first > 0 and output.buffer.last == 99
    page = await data_page(worker, "INTERRUPTIONS")
    assert page["missed"] == page["first"] == output.buffer.first == output.dropped_for_bytes
    assert [t["ts"] for t in page["tuples"]] == list(range(page["first"], 100))
    _, info = await get_json(f"http://127.0.0.1:{worker.server.port}/streams")
    described = info["outputs"]["INTERRUPTIONS"]
    assert described["held_bytes"] == output.held_bytes and described["byte_budget"] == budget


def test_the_newest_tuple_is_kept_even_when_it_alone_exceeds_the_budget() -> None:
    output = OutputStream("S", capacity=100, byte_budget=1024)
    output.extend([{"pad": "x" * 100}] * 5)
    output.extend([{"pad": "x" * 5000}])
    assert len(output.buffer) == 1 and output.buffer.last == 5 and output.held_bytes > 1024
    assert output.buffer.read(-1).missed == 5


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 30), st.integers(0, 400)), max_size=60))
def test_held_bytes_always_match_what_the_buffer_holds(ops: list[tuple[int, int, int]]) -> None:
    """Appends with gaps (as repeaters do), batches, ring overwrites, budget drops and resets keep the count exact."""
    output = OutputStream("S", capacity=16, byte_budget=1500)
    for kind, count, size in ops:
        if kind == 0:
            output.extend([{"p": "x" * size}] * count)
        elif kind == 1:
            output.append({"p": "x" * size}, output.next_index + count - 1)  # after a gap of count - 1
        elif kind == 2:
            output.append({"p": "x" * size})
        elif count == 1:
            output.reset(EMPTY)
        page = output.buffer.read(-1, oldest=1000)
        assert output.held_bytes == sum(map(len, page.items))
        assert output.held_bytes <= 1500 or len(page.items) == 1


def test_buffer_bytes_is_validated() -> None:
    with pytest.raises(WorkflowError, match="buffer_bytes' must be an integer in 1024"):
        parse_workflow(workflow_dict(1, [forwarder("F", ["S"], buffer_bytes=10)]))


# --- finding 7: idle timeout and connection cap -------------------------------------


async def test_an_idle_connection_is_closed_without_ending_its_streams(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    worker = await start_forwarder(repository, workers, params={"idle_timeout_s": 0.3})
    reader, writer = await connect(worker)
    try:
        writer.write(sensor_row(4, 1).encode() + b"\n" + sensor_row(4, 2).encode()[:5])
        await writer.drain()
        async with asyncio.timeout(10):
            assert await reader.read() == b""  # the forwarder closed it
    finally:
        writer.close()
    assert counters(worker)["idle_timeouts"] == 1 and counters(worker)["truncated"] == 1
    assert counters(worker)["open_connections"] == 0
    assert worker.outputs["SENSOR4"].progress.wm is None  # it did not say goodbye: more may come
    await send(worker, [sensor_row(4, 3).encode()])  # a sender that reconnects goes on
    await wait_until(lambda: worker.outputs["SENSOR4"].buffer.last == 1)


async def test_rows_that_arrive_while_the_forwarder_is_stalled_past_the_idle_deadline_are_read(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    """A stalled (stopped, starved) forwarder wakes with its idle deadline due and a sender's rows waiting: the
    timer fires first in that loop round. The rows must be read, not dropped unread with the connection as if it
    were idle: an unpaced sender that wrote the rest of its stream and its end promise meanwhile never sends them
    again (a replay beside CPU hogs hung on 20 streams that lost their second half this way)."""
    worker = await start_forwarder(repository, workers, params={"idle_timeout_s": 0.3})
    _reader, writer = await connect(worker)
    try:
        await wait_until(lambda: counters(worker)["open_connections"] == 1)  # reading, its idle deadline set
        rows = [sensor_row(4, ts).encode() for ts in range(1, 101)]
        writer.write(b"\n".join([*rows, promise_line("SENSOR4")]) + b"\n")  # into the socket at once
        time.sleep(0.6)  # noqa: ASYNC251 (the stall under test: this process does not run past the deadline)
        await wait_until(lambda: worker.outputs["SENSOR4"].progress.ended)
    finally:
        writer.close()
    assert counters(worker)["rows"] == 100 and counters(worker)["idle_timeouts"] == 0
    assert len(held(worker, "SENSOR4")) == 100


async def test_connections_per_address_are_capped(repository: RepositoryServer, workers: WorkerGroup) -> None:
    worker = await start_forwarder(repository, workers, params={"max_connections_per_address": 3})
    held_open = [await connect(worker) for _ in range(3)]
    try:
        await wait_until(lambda: counters(worker)["open_connections"] == 3)
        reader, writer = await connect(worker)
        async with asyncio.timeout(10):  # refused: closed at once rather than held
            try:
                closed = await reader.read(1024) == b""
            except ConnectionResetError:
                closed = True
        writer.close()
        assert closed
        assert counters(worker)["refused_connections"] == 1
        for n, (_reader, open_writer) in enumerate(held_open):
            open_writer.write(sensor_row(4, n).encode() + b"\n")
            await open_writer.drain()
        await wait_until(lambda: counters(worker)["rows"] == 3)
    finally:
        for _reader, open_writer in held_open:
            open_writer.close()
    await wait_until(lambda: counters(worker)["open_connections"] == 0)
    await send(worker, [sensor_row(8, 1).encode()])  # room again
    await wait_until(lambda: counters(worker)["rows"] == 4)
    assert counters(worker)["refused_connections"] == 1 and counters(worker)["connections"] == 4


async def test_the_default_cap_admits_a_simulator_with_a_connection_per_sensor(fwd: Worker) -> None:
    connections = [await connect(fwd) for _ in range(60)]
    try:
        for n, (_reader, writer) in enumerate(connections):
            writer.write(sensor_row(4 if n % 2 else 8, n).encode() + b"\n")
            await writer.drain()
        await wait_until(lambda: counters(fwd)["rows"] == 60)
        assert counters(fwd)["refused_connections"] == 0 and counters(fwd)["open_connections"] == 60
    finally:
        for _reader, writer in connections:
            writer.close()


async def test_a_simulated_sensor_that_pauses_past_the_idle_timeout_reconnects_without_losing_rows(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    """A paced replay pauses over the half-time break; the forwarder closes the idle link meanwhile."""
    from simulator.simulate import Link, StreamStats

    worker = await start_forwarder(repository, workers, params={"idle_timeout_s": 0.3})
    assert worker.spec.params["ingest_port"] is not None
    link = Link("SENSOR4", "127.0.0.1", worker.spec.params["ingest_port"], StreamStats(), connect_timeout_s=10)
    try:
        assert await link.ensure(force=True)
        assert await link.send(sensor_row(4, 1).encode() + b"\n")
        await wait_until(lambda: counters(worker)["idle_timeouts"] == 1)
        await wait_until(lambda: not link.connected)  # the link notices the receiver's close
        assert await link.ensure(force=True) and await link.send(sensor_row(4, 2).encode() + b"\n")
        await wait_until(lambda: counters(worker)["rows"] == 2)
        assert worker.outputs["SENSOR4"].progress.wm is None  # the idle close ended nothing
    finally:
        await link.close()
    assert [int(t.split(b'"ts":')[1].split(b",")[0]) for t in held(worker, "SENSOR4")] == [1, 2]
    assert link.stats.connects == 2
