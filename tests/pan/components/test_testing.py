"""pan.components.testing's chaining helpers: a reader of what an output gained, and the order of merged inputs."""

from __future__ import annotations

import pytest

from pan.buffers import streams
from pan.components.testing import OutputReader, build_component, in_input_order


def test_output_reader_returns_each_tuple_once_across_calls() -> None:
    merge = build_component("merge", {"output": "OUT", "clock_mode": "watermark"}, inputs=["A"])
    reader = OutputReader(merge, "OUT")
    assert reader.new() == []
    merge.feed("A", [{"ts": 1}, {"ts": 2}])
    merge.feed("A", [{"ts": 3}])  # watermark mode: an input's own order releases up to its last ts
    first = reader.new()
    merge.finish()
    rest = reader.new()
    assert [t["ts"] for t in first + rest] == [1, 2, 3]
    assert [t["i"] for t in first + rest] == [0, 1, 2]
    assert reader.new() == []


def test_in_input_order_sorts_by_ts_and_keeps_input_position_on_ties() -> None:
    a = [{"ts": 1, "from": "a"}, {"ts": 5, "from": "a"}]
    b = [{"ts": 1, "from": "b"}, {"ts": 3, "from": "b"}]
    assert [(e["ts"], e["from"]) for e in in_input_order(a, b)] == [(1, "a"), (1, "b"), (3, "b"), (5, "a")]
    assert [(e["ts"], e["from"]) for e in in_input_order(b, a)] == [(1, "b"), (1, "a"), (3, "b"), (5, "a")]
    assert in_input_order() == []


def test_an_output_reader_keeps_its_hold_while_its_output_is_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream quiet for longer than a hold lasts must not lose its lossless reader (a slow offline chain)."""
    clock = [1000.0]
    monkeypatch.setattr(streams.time, "monotonic", lambda: clock[0])
    out = streams.OutputStream("S", capacity=4)

    class Quiet:
        ctx = type("Ctx", (), {"outputs": {"S": out}})

    reader = OutputReader(Quiet(), "S")  # type: ignore[arg-type]
    for _ in range(3):  # quiet for more than HOLD_EXPIRY_S, asked all along
        clock[0] += streams.HOLD_EXPIRY_S * 0.6
        assert reader.new() == []
    out.extend([{"ts": t} for t in range(10)])  # a burst larger than the buffer
    assert [t["ts"] for t in reader.new()] == list(range(10)) and reader.missed == 0
