"""An input far ahead of a slower one is left upstream, not piled up in the ordering unit (HELD_PER_INPUT)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from pan.components import ordered
from pan.components.testing import build_component, in_input_order, output_tuples
from pan.ordering.settings import OrderingSettings
from pan.ordering.unit import OrderingUnit
from pan.wire.progress import END_OF_STREAM, StreamProgress
from tests.conftest import wait_until

CAP = 50


def rows(first: int, count: int, step: int) -> list[dict]:
    return [{"i": i, "ts": step * i} for i in range(first, first + count)]


def test_a_stream_leads_while_another_running_input_is_behind_it() -> None:
    unit = OrderingUnit(OrderingSettings(clock_mode="watermark"), ["A", "B"])
    assert not unit.leads("A")  # nothing seen yet
    unit.push("A", rows(0, 10, 10))
    assert unit.leads("A") and not unit.leads("B")  # B has said nothing: A's events wait for it
    assert unit.held("A") == 10 and unit.held("B") == 0
    unit.push("B", rows(0, 3, 100))  # B at 200: A (at 90) is the slower one now
    assert unit.leads("B") and not unit.leads("A")
    unit.promise("B", END_OF_STREAM)  # an ended input holds nobody back
    assert not unit.leads("A")
    max_mode = OrderingUnit(OrderingSettings(clock_mode="max"), ["A", "B"])
    max_mode.push("A", rows(0, 10, 10))
    assert not max_mode.leads("A")  # in max mode only clk and K decide, never another input


async def test_a_leading_input_waits_upstream_and_the_output_is_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ordered, "HELD_PER_INPUT", CAP)
    monkeypatch.setattr(ordered, "READ_BATCH", 20)
    component = build_component("merge", {"output": "OUT", "clock_mode": "watermark"}, inputs=["A", "B"])
    assert isinstance(component, ordered.OrderedComponent)
    fast, slow = rows(0, 1000, 10), rows(0, 100, 100)  # the same span of event time
    channel_a, channel_b = component.ctx.inputs["A"], component.ctx.inputs["B"]
    await component.start()
    running = asyncio.create_task(component.run())
    try:
        channel_a.add(fast)
        unit = component.unit
        assert isinstance(unit, OrderingUnit)
        await wait_until(lambda: "A" in component.counters()["held_back"], timeout_s=30)
        assert CAP <= unit.held("A") < CAP + 20  # a read of 20 at most beyond the bound
        assert channel_a.consumed is not None and channel_a.consumed < 999  # the rest is left in the input
        for start in range(0, 100, 10):  # B comes slowly; each piece lets A on by as much
            channel_b.add(slow[start:start + 10])
        for channel in (channel_a, channel_b):
            channel.set_progress(StreamProgress(wm=END_OF_STREAM))
        await wait_until(lambda: len(output_tuples(component, "OUT")) == 1100, timeout_s=30)
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    merged = [{k: v for k, v in t.items() if k != "i"} for t in output_tuples(component, "OUT")]
    expected = [{k: v for k, v in t.items() if k != "i"} for t in in_input_order(fast, slow)]
    assert merged == expected
    assert component.counters()["held_back_rounds"] > 0 and component.counters()["held_back"] == []
