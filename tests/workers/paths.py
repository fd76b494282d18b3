"""Run a component's array path and its per-event path side by side and compare what they write.

Both twins get the same calls; after each, every output's new items are
compared as the encoded bytes a subscriber would get, index by index.
"""

from __future__ import annotations

from typing import Any

from pan.components.base import Component
from pan.components.testing import build_component


class Twins:
    """One component of ``type_name`` with ``arrays: true`` and one with ``arrays: false``."""

    def __init__(self, type_name: str, params: dict[str, Any], buffer_size: int = 5_000) -> None:
        self.arrays = build_component(type_name, {**params, "arrays": True}, buffer_size=buffer_size)
        self.per_event = build_component(type_name, {**params, "arrays": False}, buffer_size=buffer_size)
        self._after = dict.fromkeys(self.arrays.ctx.outputs, -1)
        self.compared = 0  # tuples found identical so far

    def process(self, events: list[dict[str, Any]]) -> None:
        """``process`` on both (each gets its own copies: a component may keep what it is given)."""
        self.arrays.process([dict(e) for e in events])
        self.per_event.process([dict(e) for e in events])
        self.check()

    def feed(self, stream: str, events: list[dict[str, Any]]) -> None:
        """``feed`` through both ordering units."""
        self.arrays.feed(stream, [dict(e) for e in events])
        self.per_event.feed(stream, [dict(e) for e in events])
        self.check()

    def finish(self) -> None:
        self.arrays.finish()
        self.per_event.finish()
        self.check()

    def check(self) -> None:
        """Every output gained the same items, with the same indices, byte for byte."""
        for name, after in self._after.items():
            got = new_items(self.arrays, name, after)
            want = new_items(self.per_event, name, after)
            assert got == want, f"{name}: the array path differs from the per-event path after index {after}"
            if got:
                self._after[name] = got[-1][0]
                self.compared += len(got)


def new_items(component: Component, stream: str, after: int) -> list[tuple[int, bytes]]:
    """(index, encoded tuple) of every item of ``stream`` after ``after``; none may have been overwritten."""
    buffer = component.ctx.outputs[stream].buffer
    page = buffer.read(after, oldest=buffer.capacity)
    assert page.missed == 0, f"{stream}: raise the twins' buffer_size"
    return list(zip(page.indices, page.items, strict=True))
