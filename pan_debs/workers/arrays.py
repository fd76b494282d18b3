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
