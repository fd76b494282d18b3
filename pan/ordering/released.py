"""What an ordering unit hands on from one call: the events in order and the late ones.

Apart because every kind of unit returns it (the buffering one, pan/ordering/unit.py, and the speculative
one, pan/ordering/speculation.py), and the runs build it (pan/ordering/runs.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(slots=True)
class Released:
    """What one call hands on: ``events`` go to the component, ``late`` are the late ones.

    With ``late_policy="deliver"`` late events appear in both lists (in ``events``
    at the point they were released); with ``"side"`` only in ``late``, so the
    caller can route them to ``<output>_late``. Both are int64 arrays instead of
    lists when every released event was pushed as one (``push_rows``).
    """

    events: list[Any] | np.ndarray = field(default_factory=list)
    late: list[Any] | np.ndarray = field(default_factory=list)

    def extend(self, other: Released) -> None:
        self.events = _joined(self.events, other.events)
        self.late = _joined(self.late, other.late)


def as_list(values: list[Any] | np.ndarray) -> list[Any]:
    return values.tolist() if isinstance(values, np.ndarray) else values


def _joined(first: list[Any] | np.ndarray, then: list[Any] | np.ndarray) -> list[Any]:
    """``first`` extended by ``then`` (in place where ``first`` is a list), arrays as lists."""
    joined = as_list(first)
    joined.extend(as_list(then))
    return joined
