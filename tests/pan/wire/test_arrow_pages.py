"""Arrow `/data` pages (pan/wire/arrow_pages.py) decode to exactly the JSON page; `Accept` parsing (pan/http/accept.py).

The pages here are rendered by a real ``OutputStream`` from tuples a component
may append: any JSON-able dict (forwarders admit only scalars, but components
publish lists, such as heat maps' cells, and nested objects).
"""

from __future__ import annotations

from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pan.buffers.streams import OutputStream
from pan.http.accept import choose, parse_accept
from pan.wire.arrow_pages import ARROW_TYPE, JSON_KEY, PageFormatError, column_order, decode_page, encode_page

JSON = "application/json"
OFFERED = (JSON, ARROW_TYPE)

keys = st.sampled_from(["ts", "x", "player", "cells", "n", "ok"]) | st.text(
    st.characters(blacklist_categories=("Cs",)), max_size=8
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)  # orjson writes up to uint64
    | st.floats()  # NaN and infinities become null in JSON, as on the real path
    | st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4), max_leaves=12
)
tuples = st.dictionaries(keys, values, max_size=6)
sensor_rows = st.fixed_dictionaries(
    {"ts": st.integers(0, 2**62), "x": st.floats(allow_nan=False, allow_infinity=False)},
    optional={"player": st.text(max_size=3), "v": st.integers(-(2**63), 2**63 - 1)},
).map(lambda row: {key: row[key] for key in ("ts", "x", "player", "v") if key in row})  # one key order


def json_page(items: list[dict[str, Any]], *, capacity: int = 1000) -> bytes:
    """The JSON `/data` body a real output stream renders for ``items``."""
    stream = OutputStream("S", capacity=capacity)
    for item in items:
        stream.append(item)
    return stream.render(-1, oldest=10_000, latest=None)


def assert_same_page(arrow: dict[str, Any], expected: dict[str, Any]) -> None:
    """Equal dicts, and every tuple re-encodes to the same bytes (key order, -0.0, ints stay ints)."""
    assert arrow == expected
    assert [orjson.dumps(t) for t in arrow["tuples"]] == [orjson.dumps(t) for t in expected["tuples"]]


@settings(max_examples=200, deadline=None)
@given(st.lists(tuples, max_size=12))
def test_any_page_round_trips_through_arrow_or_is_left_to_json(items: list[dict[str, Any]]) -> None:
    body = json_page(items)
    expected = orjson.loads(body)
    encoded = encode_page(expected)
    if encoded is None:  # only for pages whose tuples order their keys incompatibly
        assert column_order(expected["tuples"]) is None
        return
    assert_same_page(decode_page(encoded), expected)


@settings(max_examples=100, deadline=None)
@given(st.lists(sensor_rows, max_size=20))
def test_sensor_like_pages_are_columnar_with_native_types(items: list[dict[str, Any]]) -> None:
    """Tuples that share a key order, some keys missing: every column native, nothing left to JSON."""
    expected = orjson.loads(json_page(items))
    encoded = encode_page(expected)
    assert encoded is not None
    schema = pa.ipc.open_stream(encoded).schema
    assert all(not (field.metadata or {}).get(JSON_KEY) for field in schema)
    if items:
        assert schema.field("i").type == pa.int64() and schema.field("ts").type == pa.int64()
    assert_same_page(decode_page(encoded), expected)


def test_debs_timestamps_and_floats_keep_their_types() -> None:
    items = [{"ts": 10753295594424116, "v": 1.0, "a": 3}, {"ts": 10753295594424117, "v": 2.5}]
    expected = orjson.loads(json_page(items))
    page = decode_page(encode_page(expected) or b"")
    assert [type(t["ts"]) for t in page["tuples"]] == [int, int]
    assert [type(t["v"]) for t in page["tuples"]] == [float, float]
    assert page["tuples"][0]["ts"] == 10753295594424116 and "a" not in page["tuples"][1]


def test_a_missing_key_and_an_explicit_null_stay_apart() -> None:
    expected = orjson.loads(json_page([{"ts": 1, "n": None}, {"ts": 2}, {"ts": 3, "n": 4}]))
    assert_same_page(decode_page(encode_page(expected) or b""), expected)


def test_page_fields_travel_in_the_schema_metadata() -> None:
    stream = OutputStream("S", capacity=3)
    for n in range(5):
        stream.append({"ts": n})
    expected = orjson.loads(stream.render(0, oldest=10, latest=None))
    assert expected["missed"] == 1 and expected["first"] == 2
    assert_same_page(decode_page(encode_page(expected) or b""), expected)


def test_an_empty_page_round_trips() -> None:
    expected = orjson.loads(json_page([]))
    assert_same_page(decode_page(encode_page(expected) or b""), expected)


def test_incompatible_key_orders_are_not_columnar() -> None:
    assert encode_page(orjson.loads(json_page([{"a": 1, "b": 2}, {"b": 3, "a": 4}]))) is None
    assert column_order([{"i": 0, "a": 1}, {"i": 1, "b": 2}, {"i": 2, "a": 3, "b": 4}]) == ["i", "a", "b"]


@pytest.mark.parametrize("body", [b"", b"{}", b"garbage", orjson.dumps({"status": "ok"})])
def test_a_body_that_is_not_an_arrow_page_is_a_format_error(body: bytes) -> None:
    with pytest.raises(PageFormatError):
        decode_page(body)


def test_an_arrow_stream_without_page_metadata_is_a_format_error() -> None:
    sink = pa.BufferOutputStream()
    batch = pa.record_batch([pa.array([1, 2])], names=["i"])
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    with pytest.raises(PageFormatError):
        decode_page(sink.getvalue().to_pybytes())


# --- Accept ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [None, "", "garbage", "*/*", "application/*", f"{ARROW_TYPE};q=0", f"{ARROW_TYPE};q=abc",
     f"{ARROW_TYPE};q=1.5", f"{ARROW_TYPE};q=-1", "text/html", ",,;;", f"{ARROW_TYPE}, {JSON}",
     f"{JSON}, {ARROW_TYPE};q=0.9", f"{ARROW_TYPE};q=0.5, */*", "a/b/c", "\x00\xff"],
)
def test_json_is_chosen_unless_arrow_is_preferred(header: str | None) -> None:
    assert choose(header, OFFERED) == JSON


@pytest.mark.parametrize(
    "header",
    [ARROW_TYPE, f"{ARROW_TYPE}, {JSON};q=0.5", f"{ARROW_TYPE.upper()}", f"text/html, {ARROW_TYPE};q=0.1",
     f"{JSON};q=0.2, {ARROW_TYPE}", f"{ARROW_TYPE}; q=0.8, */*;q=0.1", f"garbage;;, {ARROW_TYPE}",
     f"{JSON};q=bad, {ARROW_TYPE};q=0.3"],
)
def test_arrow_is_chosen_when_preferred(header: str) -> None:
    assert choose(header, OFFERED) == ARROW_TYPE


def test_parse_accept_skips_malformed_entries_only() -> None:
    assert parse_accept(f"nonsense, {JSON};q=0.7, x/y;q=2") == [("application", "json", 0.7)]


def test_lists_of_floats_such_as_heat_map_cells_are_native_lists() -> None:
    cells = [[round((n * 37 + k) % 101 / 7, 3) for k in range(64 * 100)] for n in range(3)]
    cells[1][5] = -0.0
    items = [{"ts": n, "player": "B7", "cells": c} for n, c in enumerate(cells)] + [{"ts": 9, "player": "B7"}]
    expected = orjson.loads(json_page(items))
    encoded = encode_page(expected) or b""
    assert pa.ipc.open_stream(encoded).schema.field("cells").type == pa.list_(pa.float64())
    assert_same_page(decode_page(encoded), expected)
    no_missing = orjson.loads(json_page(items[:3]))
    assert_same_page(decode_page(encode_page(no_missing) or b""), no_missing)
