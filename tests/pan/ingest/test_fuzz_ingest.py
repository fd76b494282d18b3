"""Fuzzing the TCP ingest line format of a real forwarder (issue 10, build item 11 and findings 2, 4, 6).

Each Hypothesis example opens one connection to the forwarder's ingest port
and sends valid rows (CSV and JSON, for two streams) mixed with garbage:
malformed CSV and JSON, integers beyond 64 bits, ``ts`` out of range, wrong
types, unexpected streams, forged promises, over-long lines, CR/LF mixes,
non-UTF-8 bytes, cut into chunks at arbitrary points.  The connection ends
with a valid sentinel row and is closed cleanly.  Then, read back over
`/data`:

- the new tuples of each stream are exactly the valid rows sent to it, in
  order, with their values, and consecutive indices (nothing lost, nothing
  invented: no invalid line ever becomes a tuple);
- every `/data` answer stays decodable (finding 2: one bad row poisoned a page).

Afterwards the forwarder still answers `/health`, `/streams` and
`/metrics` with 200 (finding 4: a forged promise turned `/streams` into a
500), counts every delivered row, and every tuple it holds fits the schema.
"""

from __future__ import annotations

import json
import logging
import math
import random
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tests.support.fuzz_grammar import INT64_MAX, INT64_MIN, SLOW, fuzz_settings
from tests.support.live_servers import HOST, LiveServers, LogCounter, RawHttp, check_error_contract, wait_for

pytestmark = pytest.mark.timeout(900)

FIELDS = ("sid", "ts", "x", "y", "z", "v", "a", "vx", "vy", "vz", "ax", "ay", "az")
#: CSV-layout streams and their sids, and one stream of the generic schema (ts plus JSON scalars).
SENSORS = {"SENSOR4": 4, "SENSOR8": 8}
GENERIC = "EVENTS"
STREAMS = [*SENSORS, GENERIC]
MAX_STRING_CHARS = 4096
TS_LIMIT = 2**62  # every ts is in [0, 2^62): 2^62 is the end-of-stream watermark
END_OF_STREAM = TS_LIMIT
#: Lines per example; the slow suite sends about 10,000 lines in each of the line families below.
MAX_LINES = 40
EXAMPLES = 2_500 if SLOW else 40
BUFFER = 10_000

_RNG = random.Random(4)


# --- valid rows ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """A valid row: its stream, the tuple it must become (without ``i``), and one of its encodings."""

    stream: str
    fields: tuple[tuple[str, Any], ...]
    line: bytes

    def as_tuple(self) -> dict[str, Any]:
        return dict(self.fields)


def _value(rng: random.Random) -> int:
    return rng.choice([0, -1, 1, INT64_MIN, INT64_MAX, rng.randint(-(10**6), 10**6), rng.randint(INT64_MIN, INT64_MAX)])


def _ts(rng: random.Random) -> int:
    return rng.choice([0, 1, TS_LIMIT - 1, rng.randint(0, 10**16), rng.randint(0, TS_LIMIT - 1)])


def _json_line(fields: dict[str, Any], rng: random.Random, stream: str) -> bytes:
    items = [("stream", stream), *fields.items()]
    rng.shuffle(items)
    if rng.random() < 0.2:  # spaced and ASCII-escaped, as another JSON library writes it
        return json.dumps(dict(items), separators=(", ", ": ")).encode()
    return orjson.dumps(dict(items))


def _valid_rows(count: int) -> list[Row]:
    rows = []
    for k in range(count):
        stream = "SENSOR4" if k % 3 else "SENSOR8"
        values = (SENSORS[stream], _ts(_RNG), *(_value(_RNG) for _ in FIELDS[2:]))
        fields = dict(zip(FIELDS, values, strict=True))
        line = ",".join(map(str, values)).encode() if k % 2 else _json_line(fields, _RNG, stream)
        rows.append(Row(stream, tuple(fields.items()), line))
    return rows


def _scalar(rng: random.Random) -> Any:
    """A JSON scalar the generic schema takes: int64, finite float, string of at most 4,096 characters, bool, null."""
    return rng.choice(
        [
            rng.choice([INT64_MIN, INT64_MAX, 0, rng.randint(-(10**9), 10**9)]),
            # (no integral float beyond int64 such as 1e308: it cannot be told from an over-long integer literal,
            # which orjson also hands over as a float, so pan.ingest.schema refuses both as not_int64)
            rng.choice([1.5, -0.25, 1e18, -1e-300, 3.141592653589793, 2.5e-10]),
            rng.choice(["", "text", "caf\u00e9 \u4e2d \U0001f600", "x" * MAX_STRING_CHARS, '"quoted,\\ \\n"']),
            rng.choice([True, False, None]),
        ]
    )


def _generic_rows(count: int) -> list[Row]:
    rows = []
    for _ in range(count):
        fields = {"ts": _ts(_RNG)}
        for name in _RNG.sample(["a", "b", "event", "n", "note"], _RNG.randint(0, 4)):
            fields[name] = _scalar(_RNG)
        rows.append(Row(GENERIC, tuple(fields.items()), _json_line(fields, _RNG, GENERIC)))
    return rows


VALID_ROWS = _valid_rows(200) + _generic_rows(60)
SENTINEL = Row(
    "SENSOR4",
    tuple(zip(FIELDS, (4, 123, *range(11)), strict=True)),
    b"4,123," + ",".join(map(str, range(11))).encode(),
)


# --- garbage: lines the contract refuses (none of them may become a tuple) -------------------------------


def _csv(values: list[Any]) -> bytes:
    return b",".join(v if isinstance(v, bytes) else str(v).encode() for v in values)


def _good_values(sid: int = 4) -> list[Any]:
    return [sid, 1000, *range(1, 12)]


def _with(index: int, value: Any, sid: int = 4) -> list[Any]:
    values = _good_values(sid)
    values[index] = value
    return values


def _json_with(**changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"stream": "SENSOR4", **dict(zip(FIELDS, _good_values(), strict=True))}
    for key, value in changes.items():
        if value is _DROP:
            row.pop(key)
        else:
            row[key] = value
    return row


_DROP = object()
HUGE = 2**63


def _garbage_lines() -> list[bytes]:
    csv_lines = [
        _csv(_good_values()[:12]),  # 12 fields
        _csv([*_good_values(), 0]),  # 14 fields
        b"4",
        b",,,,,,,,,,,,",
        _csv(_with(2, "abc")),
        _csv(_with(2, "1.5")),
        _csv(_with(2, "")),
        _csv(_with(3, "0x10")),
        _csv(_with(3, "1e3")),
        _csv(_with(4, "nan")),
        _csv(_with(4, b"\xff\xfe")),
        _csv(_with(5, b"\x00")),
        _csv(_with(2, HUGE)),
        _csv(_with(2, -HUGE - 1)),
        _csv(_with(2, "9" * 400)),  # finding 2: this row poisoned every reader
        b"8,1," + b"9" * 400 + b",0,0,0,0,0,0,0,0,0,0",
        _csv(_with(1, -1)),
        _csv(_with(1, -5)),
        _csv(_with(1, TS_LIMIT)),
        _csv(_with(1, INT64_MAX)),
        _csv(_with(1, 2**200)),  # finding 2: a CSV ts of 2^200
        _csv(_with(0, HUGE)),
        _csv(_good_values(sid=5)),  # an unexpected stream
        _csv(_good_values(sid=-4)),
        b"4,10\r00,1,2,3,4,5,6,7,8,9,10,11",  # a lone CR inside a line
        # CSV integers are ASCII digits with an optional minus, although Python's int() reads all of these:
        _csv(_with(1, "1000\r")),
        _csv(_with(1, " 1000")),
        _csv(_with(1, "1000 ")),
        _csv(_with(1, "+1000")),
        _csv(_with(1, "1_000")),
        _csv(_with(2, "\u0661\u0662".encode())),  # Arabic-Indic digits
        _csv(_with(2, "\uff11".encode())),  # a fullwidth digit
        b"4,1000,1,2,3,4,5,6,7,8,9,10,11\r4,1000,1,2,3,4,5,6,7,8,9,10,11",
        b" ",
        b"\x00" * 10,
        b"GET / HTTP/1.1",
        bytes(range(1, 10)) + bytes(range(11, 256)),  # every byte but the newline
    ]
    json_rows: list[Any] = [
        _json_with(ts=-5),  # finding 2, as reported
        _json_with(x="evil"),
        _json_with(sid="not-a-number"),
        _json_with(v=[]),
        _json_with(v={}),
        _json_with(x=1.5),
        _json_with(x=None),
        _json_with(x=True),
        _json_with(ts="5"),
        _json_with(ts=1.5),
        _json_with(ts=True),
        _json_with(ts=TS_LIMIT),
        _json_with(ts=_DROP),
        _json_with(y=_DROP),
        _json_with(stream=_DROP),
        _json_with(stream="SENSOR5"),
        _json_with(stream=4),
        _json_with(stream=""),
        _json_with(stream=["SENSOR4"]),
        _json_with(sid=8),  # sid names another stream than the row is sent to
        _json_with(extra=1),  # a SENSOR stream has exactly the 13 CSV fields
        [1, 2],
        None,
        "SENSOR4",
    ]
    json_rows += [  # the generic stream: ts plus JSON scalars only
        {"stream": GENERIC, "ts": -1},
        {"stream": GENERIC, "ts": TS_LIMIT},
        {"stream": GENERIC, "ts": 5, "a": [1]},
        {"stream": GENERIC, "ts": 5, "a": {"b": 1}},
        {"stream": GENERIC, "ts": 5, "a": "x" * (MAX_STRING_CHARS + 1)},
        {"stream": GENERIC, "ts": "5"},
        {"stream": GENERIC, "event": "no ts"},
    ]
    json_lines = [orjson.dumps(row) for row in json_rows]
    json_lines += [
        b'{"stream": "EVENTS", "ts": 5, "n": ' + str(HUGE).encode() + b"}",
        b'{"stream": "EVENTS", "ts": 5, "n": -' + str(HUGE + 1).encode() + b"}",
        b'{"stream": "EVENTS", "ts": 5, "f": 1e999}',
        b'{"stream": "EVENTS", "ts": 5, "f": NaN}',
    ]
    json_lines += [
        b"{",
        b"{}",
        b'{"stream": "SENSOR4", "ts": NaN}',
        b'{"stream": "SENSOR4", "ts": 1000, "x": Infinity}',
        b'{"stream": "SENSOR4", "ts": ' + str(2**64).encode() + b"}",
        b'{"stream": "SENSOR4", "ts": 1000, "x": ' + str(HUGE).encode() + b"}",
        b'{"stream": "SENSOR4", "ts": 1000, "x": 1' + b"0" * 400 + b"}",
        b'{"stream": "SENSOR\xff", "ts": 1000}',
        b'{"stream": "SENSOR4", "ts": 1000, "promise": "yes"}',  # not a promise, and not a row either
    ]
    long_lines = [
        b"4,1000," + b"1" * 70_000 + b",2,3,4,5,6,7,8,9,10,11",  # over 64 KiB, in one read
        b'{"stream": "SENSOR4", "ts": 1000, "pad": "' + b"x" * 70_000 + b'"}',
        b"4,1000,0" + b"0" * 300_000 + b"1,2,3,4,5,6,7,8,9,10,11",  # spans several 256 KiB reads
    ]
    return csv_lines + json_lines + long_lines


def _promise_lines() -> list[bytes]:
    """Promise lines, honest and forged (finding 4: ts 2^62 from a stranger): never data."""
    lines = []
    for ts in [0, 1000, 10**12, TS_LIMIT - 1, TS_LIMIT, INT64_MAX, -1]:
        for stream in ("SENSOR4", "SENSOR8", "SENSOR5"):
            lines.append(orjson.dumps({"stream": stream, "ts": ts, "promise": True}))
    lines.append(b'{"stream": "SENSOR4", "ts": ' + str(2**64).encode() + b', "promise": true}')
    lines.append(b'{"stream": "SENSOR4", "ts": "soon", "promise": true}')
    lines.append(b'{"stream": "SENSOR4", "promise": true}')
    return lines


GARBAGE = _garbage_lines()
#: The lines issue 10 reports as accepted (findings 2 and 4), and integers beyond int64: always sent first.
REPORTED = [
    b"8,1," + b"9" * 400 + b",0,0,0,0,0,0,0,0,0,0",
    orjson.dumps(_json_with(ts=-5)),
    orjson.dumps(_json_with(x="evil")),
    orjson.dumps(_json_with(sid="not-a-number")),
    orjson.dumps(_json_with(v=[])),
    _csv(_with(1, 2**200)),
    b'{"stream": "SENSOR4", "ts": 4611686018427387904, "promise": true}',
    # Integer literals beyond int64 that a JSON parser may hand over as floats (README: every integer int64).
    b'{"stream": "EVENTS", "ts": 5, "n": -9223372036854775809}',
    b'{"stream": "EVENTS", "ts": 5, "n": 18446744073709551616}',
    b'{"stream": "SENSOR4", "ts": 5, "sid": 4, "x": -9223372036854775809, "y": 0, "z": 0, "v": 0, "a": 0, '
    b'"vx": 0, "vy": 0, "vz": 0, "ax": 0, "ay": 0, "az": 0}',
]
PROMISES = _promise_lines()
#: A line of the example: ("row", Row) or ("junk", bytes); junk includes a share of random binary.
LINES = st.one_of(
    st.sampled_from(VALID_ROWS).map(lambda row: ("row", row)),
    st.sampled_from(GARBAGE).map(lambda line: ("junk", line)),
    st.sampled_from(PROMISES).map(lambda line: ("junk", line)),
    st.binary(min_size=1, max_size=40).map(lambda data: ("junk", data.replace(b"\n", b""))),
)
TERMINATORS = st.sampled_from([b"\n", b"\n", b"\n", b"\r\n"])


# --- servers --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def log_counter() -> Iterator[LogCounter]:
    with LogCounter.on_root() as counter:
        yield counter


@pytest.fixture(scope="module")
def forwarder(log_counter: LogCounter) -> Iterator[LiveServers]:
    live = LiveServers.start(list(STREAMS), buffer_size=BUFFER)
    try:
        yield live
    finally:
        live.stop()


@pytest.fixture(scope="module")
def http(forwarder: LiveServers) -> Iterator[RawHttp]:
    client = RawHttp(forwarder.worker_port)
    yield client
    client.close()


class Reader:
    """Where each stream was read up to, and what was delivered in all."""

    def __init__(self, http: RawHttp) -> None:
        self.http = http
        self.position = dict.fromkeys(STREAMS, -1)
        self.delivered = 0
        self.lines_sent = 0

    def fetch(self, stream: str) -> dict[str, Any]:
        answer = self.http.get(f"/data?s={stream}&i={self.position[stream]}&n={BUFFER}")
        check_error_contract(answer)
        assert answer.status == 200, answer.describe()
        return answer.json()  # a page that cannot be decoded fails right here


@pytest.fixture(scope="module")
def reader(http: RawHttp) -> Reader:
    return Reader(http)


def _send(port: int, payload: bytes, cuts: list[int]) -> None:
    with socket.create_connection((HOST, port), timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        start = 0
        for cut in [*sorted({c % (len(payload) + 1) for c in cuts}), len(payload)]:
            if cut > start:
                sock.sendall(payload[start:cut])
                start = cut


def test_valid_rows_survive_any_garbage(forwarder: LiveServers, reader: Reader) -> None:
    """Valid rows between garbage lines all arrive, in order, and nothing else does."""

    @fuzz_settings(requests=EXAMPLES, batch=1)
    @given(
        st.lists(st.tuples(LINES, TERMINATORS), min_size=1, max_size=MAX_LINES),
        st.lists(st.integers(0, 1 << 20), max_size=3),
        st.sampled_from([b"", b"", b"", b"4,1000,1,2", b'{"stream": "SENSOR4", "ts": 5', b"\xff\xfe"]),
    )
    @example(lines=[*((("junk", line), b"\n") for line in REPORTED), (("row", VALID_ROWS[1]), b"\r\n")], cuts=[], tail=b"")  # noqa: E501
    def fuzz(lines: list[tuple[tuple[str, Any], bytes]], cuts: list[int], tail: bytes) -> None:
        expected: dict[str, list[dict[str, Any]]] = {name: [] for name in STREAMS}
        payload = bytearray()
        for (kind, item), end in lines:
            if kind == "row":
                expected[item.stream].append(item.as_tuple())
                payload += item.line + end
            else:
                payload += item + end
        expected["SENSOR4"].append(SENTINEL.as_tuple())
        # The sentinel, then the end of SENSOR4 (a closed connection ends nothing), then a tail cut off by
        # the close, which is never a row.
        payload += SENTINEL.line + b"\n" + orjson.dumps({"stream": "SENSOR4", "ts": END_OF_STREAM, "promise": True})
        payload += b"\n" + tail
        _send(forwarder.ingest_port, bytes(payload), cuts)
        reader.lines_sent += len(lines) + 1

        def sentinel_arrived() -> dict[str, Any] | None:
            page = reader.fetch("SENSOR4")
            done = len(page["tuples"]) >= len(expected["SENSOR4"]) and page["meta"].get("wm") == END_OF_STREAM
            return page if done else None

        pages = {"SENSOR4": wait_for(sentinel_arrived)}  # after the sentinel, every other line was handled too
        pages.update({stream: reader.fetch(stream) for stream in STREAMS if stream != "SENSOR4"})
        for stream, page in pages.items():
            got = [{k: v for k, v in t.items() if k != "i"} for t in page["tuples"]]
            indices = [t["i"] for t in page["tuples"]]
            start = reader.position[stream] + 1
            if indices:  # first, so that a failing example leaves the next one (or its shrinking) a clean start
                reader.position[stream] = indices[-1]
            reader.delivered += len(got)
            assert indices == list(range(start, start + len(got))), f"{stream}: indices {indices[:20]}, from {start}"
            extra = [row for row in got if row not in expected[stream]]
            assert not extra, f"{stream}: tuples from no valid row: {extra[:3]}; payload {bytes(payload)[:1500]!r}"
            assert got == expected[stream], (
                f"{stream}: sent {len(expected[stream])} valid rows, got {len(got)} tuples: "
                f"{[row['ts'] for row in expected[stream]]} vs {[row['ts'] for row in got]}; "
                f"payload {bytes(payload)[:1500]!r}"
            )

    fuzz()
    if SLOW:
        assert reader.lines_sent >= 10_000, f"only {reader.lines_sent} lines sent"


def _is_scalar(value: Any) -> bool:
    if type(value) is int:
        return INT64_MIN <= value <= INT64_MAX
    if type(value) is float:
        return math.isfinite(value)
    if type(value) is str:
        return len(value) <= MAX_STRING_CHARS
    return value is None or type(value) is bool


def _fits_schema(item: dict[str, Any], stream: str) -> bool:
    ts_ok = type(item.get("ts")) is int and 0 <= item["ts"] < TS_LIMIT
    if stream == GENERIC:
        return ts_ok and all(_is_scalar(value) for value in item.values())
    return (
        ts_ok
        and set(item) == {"i", *FIELDS}
        and all(type(item[name]) is int and INT64_MIN <= item[name] <= INT64_MAX for name in FIELDS)
        and item["sid"] == SENSORS[stream]
    )


def test_forwarder_answers_after_fuzzing(
    forwarder: LiveServers, http: RawHttp, reader: Reader, log_counter: LogCounter
) -> None:
    """`/health`, `/streams` and `/metrics` answer 200; every row counted; every tuple held fits the schema."""
    assert http.get("/health").status == 200
    streams = http.get("/streams")
    assert streams.status == 200 and streams.content_type.startswith("application/json"), streams.describe()
    counters = streams.json()["component"]
    assert counters["rows"] == reader.delivered, counters
    metrics = http.get("/metrics")
    assert metrics.status == 200 and b"pan_component_rows" in metrics.body, metrics.describe()
    for stream in STREAMS:
        answer = http.get(f"/data?s={stream}&n={BUFFER}")
        assert answer.status == 200, answer.describe()
        bad = [t for t in answer.json()["tuples"] if not _fits_schema(t, stream)]
        assert not bad, f"{stream} holds tuples outside its schema: {bad[:3]}"
    assert log_counter.at_least(logging.ERROR) == 0, f"errors logged: {log_counter.errors}"
