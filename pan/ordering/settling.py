"""The buffering unit inside a speculative unit: it decides what is settled (final).

Apart from the speculative unit (``pan/ordering/speculation.py``): it is a buffering unit
(``pan/ordering/unit.py``) with a stricter settling rule and the views the speculative unit reads.
"""

from __future__ import annotations

from collections.abc import Sequence

from pan.ordering.settings import OrderingSettings
from pan.ordering.unit import OrderingUnit


class SettlingUnit(OrderingUnit):
    """The buffering unit inside: settles strictly below ``clk - K`` in both clock modes."""

    def __init__(self, settings: OrderingSettings, streams: Sequence[str]) -> None:
        super().__init__(settings, streams)
        self._tie = 1

    @property
    def settled_key(self) -> tuple[float, int]:
        """(ts, stream position) of the last event settled in order."""
        return self._rel_key

    def progress_of(self, pos: int) -> int | None:
        """How far stream ``pos`` has come in this unit: its largest ts or promise."""
        return self._prog[pos]

    def clock_with(self, seen: Sequence[int | None]) -> int | None:
        """clk as it would be if each stream had also come as far as ``seen`` (raw, unsettled input).

        Watermark mode: the slowest running stream; max mode: the furthest clock stream. Never below clk.
        """
        progress = [p if s is None or (p is not None and p >= s) else s for p, s in zip(self._prog, seen, strict=True)]
        if self._watermark:
            running = [p for p, e in zip(progress, self._ended, strict=True) if not e]
            if not running or None in running:
                return self._clk
            clk = min(running)  # type: ignore[type-var]
        else:
            ahead = [p for p, c in zip(progress, self._is_clock, strict=True) if c and p is not None]
            if not ahead:
                return self._clk
            clk = max(ahead)
        return clk if self._clk is None or clk > self._clk else self._clk


__all__ = ["SettlingUnit"]
