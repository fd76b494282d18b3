"""How an ordered component feeds its ordering unit and hands on what the unit releases.

Input events go into the unit (tuples, or row ids of column pages); what it releases goes to ``process``,
late events to the late stream and the loss reports. A mixin of ``OrderedComponent``
(``pan/components/ordered.py``), whose ``__init__`` sets the unit and the row store: apart from the run loop,
which decides when to read, as this decides what becomes of what was read.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pan.buffers.tuples import Tuple
from pan.ordering.released import Released
from pan.ordering.unit import OrderingUnit
from pan.wire.progress import END_OF_STREAM


class OrderedFeed:
    """The way from an ordered component's inputs through its ordering unit to ``process``."""

    def feed(self, stream: str, events: list[Tuple]) -> None:
        """Push one input's new events through the unit (also usable offline, in tests)."""
        if self.row_store is not None and int in (kinds := set(map(type, events))):
            self._feed_rows(stream, events, all_rows=kinds == {int})
            return
        try:
            released = self.unit.push(stream, events)
        except ValueError:  # a tuple without an integer ts: count it, keep the rest
            valid = [e for e in events if type(e.get("ts")) is int]
            self.untimed_tuples += len(events) - len(valid)
            self.ctx.log.warning("%s: %d tuples without an integer ts dropped", stream, len(events) - len(valid))
            released = self.unit.push(stream, valid)
        self._handle(released)

    def _feed_rows(self, stream: str, events: list[Any], all_rows: bool) -> None:
        """``feed`` of row ids (and of the dicts of pages that were not columns, unless ``all_rows``), whose
        ``ts`` the row store knows."""
        assert self.row_store is not None
        if all_rows and isinstance(self.unit, OrderingUnit):  # the usual batch: all rows of column pages
            ids = np.array(events, dtype=np.int64)
            self._handle(self.unit.push_rows(stream, self.row_store.ts_array(ids), ids))
            return
        tss = self.items_ts(events)
        timed = [k for k, ts in enumerate(tss) if type(ts) is int]
        if len(timed) < len(events):
            self.untimed_tuples += len(events) - len(timed)
            self.ctx.log.warning("%s: %d tuples without an integer ts dropped", stream, len(events) - len(timed))
        self._handle(self.unit.push_timed(stream, [tss[k] for k in timed], [events[k] for k in timed]))

    def items_ts(self, items: list[Any]) -> list[Any]:
        """``item_ts`` of every item, with one row-store lookup for all the row ids among them."""
        if self.row_store is None:
            return [self.item_ts(item) for item in items]
        ids = [item for item in items if type(item) is int]
        if len(ids) == len(items):  # row ids alone
            return self.row_store.ts(ids)
        id_ts = iter(self.row_store.ts(ids))
        return [next(id_ts) if type(item) is int else self.item_ts(item) for item in items]

    def item_ts(self, item: Any) -> Any:
        """An input item's ``ts``: a row id's from the row store, a tuple's own (anything, even missing)."""
        if type(item) is int and self.row_store is not None:
            return self.row_store.ts([item])[0]
        return item.get("ts") if type(item) is dict else None

    def finish(self) -> None:
        """End of input (offline runs): every input ends, as its producer's end promise would say,
        so everything still buffered is released in order and the outputs end the same way as live."""
        for name in self.ctx.inputs:
            self._handle(self.unit.promise(name, END_OF_STREAM))

    def _handle(self, released: Released) -> None:
        late = released.late
        if isinstance(late, np.ndarray):  # row ids released as an array
            late = late.tolist()
        if late and self.row_store is not None:  # row ids become tuples (before ``process`` takes those it gets)
            late = self._late_tuples(late)
        if len(released.events) and self.snapshots is None:  # a speculative unit has handed them on already
            self.process(released.events)
        if late and self.late_output is not None:
            self.late_output.extend(late)
        if late:
            self._report_late(late)
        if self.snapshots is not None:
            self.snapshots.settle(self.unit.oldest_snapshot)  # type: ignore[union-attr]
        self._publish_meta()

    def _late_tuples(self, late: list[Any]) -> list[Tuple]:
        """Late items as tuples; rows that ``process`` does not get as well (``late_policy: side``) are let go."""
        assert self.row_store is not None
        ids = [item for item in late if type(item) is int]
        if not ids:
            return late
        tuples = iter(self.row_store.tuples(ids))
        if self.late_output is not None:  # side: the late rows go to the late stream only
            self.row_store.forget(ids)
        return [next(tuples) if type(item) is int else item for item in late]


__all__ = ["OrderedFeed"]
