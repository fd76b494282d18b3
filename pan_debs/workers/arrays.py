"""The ``arrays`` param: a component computes on numpy arrays or event by event.

Both paths give byte-identical outputs; the per-event one stays as the
reference the tests compare the array path with, and ``pan bench floor``
times them side by side. Each component picks its default by what that
benchmark measured: while rows arrive as one dict each, turning a batch into
int columns costs more than the row loops of player averages, hits and the
active ball save, so those default to the per-event path; heat maps and
running analysis, which do much more per row, default to arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain
from typing import Any

import numpy as np

from pan.specs import WorkerSpec

PARAM = "arrays"


def arrays_param(spec: WorkerSpec, default: bool = True) -> tuple[bool, list[str]]:
    """Whether ``spec`` asks for the array path (``default`` when it does not say), and problems with it."""
    value = spec.params.get(PARAM, default)
    if type(value) is not bool:
        return True, [f"{PARAM}: must be true (numpy arrays) or false (event by event), got {value!r}"]
    return value, []


def int_table(events: list[dict[str, Any]], row: Callable[[dict[str, Any]], tuple[Any, ...]]) -> np.ndarray | None:
    """``row``'s fields (an ``itemgetter``) of every event as int64 columns; None unless every one is a plain
    int within int64 (the batch then goes event by event, which counts and reports the odd rows)."""
    try:
        rows = list(map(row, events))
    except (KeyError, TypeError):
        return None
    if set(map(type, chain.from_iterable(rows))) != {int}:
        return None
    try:
        return np.array(rows, dtype=np.int64)
    except OverflowError:
        return None


class ArrayPath:
    """``process`` for a component with both paths.

    A batch whose ``ROW`` fields are all plain ints goes to ``_process_table`` as int64 columns, any
    other batch event by event (``_process_events``), which counts and reports the odd rows.
    """

    ROW: Callable[[dict[str, Any]], tuple[Any, ...]]  # the fields the array path takes (an ``itemgetter``)
    arrays: bool  # the ``arrays`` param
    rows_on_arrays: int

    def process(self, events: list[dict[str, Any]]) -> None:
        if self.arrays and events:
            table = self._int_table(events)
            if table is not None:
                self.rows_on_arrays += len(events)
                self._process_table(table)
                return
        self._process_events(events)

    def _int_table(self, events: list[dict[str, Any]]) -> np.ndarray | None:
        return int_table(events, self.ROW)

    def _process_table(self, table: np.ndarray) -> None:
        raise NotImplementedError

    def _process_events(self, events: list[dict[str, Any]]) -> None:
        raise NotImplementedError
