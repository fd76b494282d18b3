"""Issue 10, ingest side, finding 2: typed rows.  A row that does not obey its stream's schema is refused.

CSV integers are ASCII digits within int64, JSON rows into CSV streams have the CSV layout, declared schemas
are enforced, forwarder params are validated, and rejections are counted, exported and logged rate-limited.
Every test with a forwarder talks to it over real TCP and reads it back over HTTP.
"""

from __future__ import annotations

import logging

import pytest

from pan.config.specs import WorkflowError
from pan.ingest.lines import END_OF_STREAM
from pan.worker.worker import Worker
from pan.workflow.parser import parse_workflow
from simulator.sources import interruption_lines
from tests.conftest import forwarder, get_json, sensor_row, wait_until, workflow_dict
from tests.pan.ingest.ingest_forwarder import assert_prometheus_text, counters, data_page, held, json_row, send
from tests.support import prometheus


def sensor_fields(sid: int, ts: int) -> dict[str, int]:
    names = ("sid", "ts", "x", "y", "z", "v", "a", "vx", "vy", "vz", "ax", "ay", "az")
    return dict(zip(names, map(int, sensor_row(sid, ts).split(",")), strict=True))


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
