"""pan.testing's chaining helpers: a reader of what an output gained, and the order of merged inputs."""

from __future__ import annotations

from pan.testing import OutputReader, build_component, in_input_order


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
