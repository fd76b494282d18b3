"""Lost input of an ordered component (detection policies, docs/policies.md): gaps in an input, late events.

A mixin of ``OrderedComponent`` (``pan/components/ordered.py``): apart because hearing of lost input is the
hook a detection policy overrides (``input_lost``), beside the middleware that finds the losses.
"""

from __future__ import annotations

from pan.buffers.tuples import Tuple


class InputLoss:
    """The reports of lost input an ordered component hears (``input_lost``) and how they are found."""

    # --- lost input (detection policies) ---------------------------------------------

    def input_lost(self, stream: str | None, count: int, ts_from: int | None, ts_to: int | None) -> None:
        """``count`` tuples of ``stream`` (None: not known) were lost to this component.

        Called for index gaps in an input (tuples missed upstream or overwritten) and
        for events the ordering unit found late. The lost tuples' ts lie between
        ``ts_from`` and ``ts_to`` when the input is in ts order (the ts of the tuples
        received around the gap; None where there is none); a late event's range is
        its own ts. Reports come before the events around them are processed. The
        default only counts; a component whose ``policy`` is ``nfp`` overrides this
        to withhold or mark the outputs the loss could change.
        """
        self.loss_reports += 1

    def _note_read(self, stream: str, item: Tuple) -> None:
        ts = self.item_ts(item)
        if type(ts) is int:
            self._input_ts[stream] = ts

    def _report_missed(self, stream: str, after: int, indices: list[int], items: list[Tuple]) -> None:
        """One ``input_lost`` per run of missing indices in a page read after index ``after``."""
        expected = after + 1
        for index, item in zip(indices, items, strict=True):
            if index > expected:
                ts = self.item_ts(item)
                self.input_lost(stream, index - expected, self._input_ts.get(stream), ts if type(ts) is int else None)
            expected = index + 1
            self._note_read(stream, item)
        if not items:
            self.input_lost(stream, 0, self._input_ts.get(stream), None)

    def _report_late(self, late: list[Tuple]) -> None:
        for item in late:
            ts = item.get("ts")
            ts = ts if type(ts) is int else None
            self.input_lost(None, 1, ts, ts)


__all__ = ["InputLoss"]
