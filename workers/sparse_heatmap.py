"""The compact form of a heat map, shared by everything that writes or reads one (docs/q1-q3.md, "Q3 heat maps").

A dense 64x100 map printed as 6,400 doubles is 30 kB of JSON for a player who
has been in a few hundred cells. The compact form keeps only what carries
information:

- ``ppm``: the non-zero cells' shares of the window's time, in parts per
  million, as integers: ``floor(count / total * 1e6 + 0.5)`` in float64
  (``shares_ppm``). One ppm of the whole game is 5.4 ms, about one sample of a
  200 Hz player; of a 1-minute window, 0.06 ms.
- ``runs``: where those cells are, as ``[start, length, start, length, ...]``
  over the cell index ``ix * ny + iy``: a player's cells lie in runs along a
  column, so a run of ten cells costs two numbers instead of ten.
- ``grid``: ``"<nx>x<ny>"``, so that a reader can expand the map without the stream's name.

The streaming component and the Spark reference both round through
``shares_ppm`` from exact integer counts, so they agree bit for bit. ``dense``
is the one way back to the grid: the dashboard's script does the same in
JavaScript, and its browser test checks it against this one.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import orjson

PPM = 1_000_000
#: A map with nothing counted: what a stream holds before its first tuple.
EMPTY_BODY = b'"runs":[],"ppm":[]'

_NUMPY = orjson.OPT_SERIALIZE_NUMPY


def shares_ppm(counts: np.ndarray, total: int) -> np.ndarray:
    """int64 parts per million of ``total`` per cell, rounded half up; all 0 while ``total`` is 0.

    ``counts`` are exact integers (ps) below 2**53, so ``counts / total`` is the
    correctly rounded quotient, and the rest is one fixed sequence of float64 steps.
    """
    if not total:
        return np.zeros(len(counts), dtype=np.int64)
    return np.floor(counts / total * PPM + 0.5).astype(np.int64)


def runs_and_values(ppm: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``([start, length, ...], values)`` of the non-zero cells of a dense ppm vector."""
    cells = np.flatnonzero(ppm)
    if not cells.size:
        return cells, cells
    breaks = np.flatnonzero(np.diff(cells) != 1) + 1
    starts = cells[np.r_[0, breaks]]
    ends = cells[np.r_[breaks - 1, cells.size - 1]]
    return np.column_stack([starts, ends - starts + 1]).ravel(), ppm[cells]


def encode_body(ppm: np.ndarray) -> bytes:
    """The ``"runs":[...],"ppm":[...]`` part of a heat-map tuple's JSON for a dense ppm vector."""
    runs, values = runs_and_values(ppm)
    if not runs.size:
        return EMPTY_BODY
    return b'"runs":%b,"ppm":%b' % (orjson.dumps(runs, option=_NUMPY), orjson.dumps(values, option=_NUMPY))


def grid_size(grid: str) -> int:
    """Cells of a ``"<nx>x<ny>"`` grid."""
    nx, _, ny = grid.partition("x")
    return int(nx) * int(ny)


def dense(t: Mapping[str, Any]) -> np.ndarray:
    """A heat-map tuple's dense grid: int64 ppm per cell, index ``ix * ny + iy`` (percent: divide by 10,000).

    Raises ValueError on a tuple whose runs do not fit its grid or do not match its values.
    """
    cells = np.zeros(grid_size(t["grid"]), dtype=np.int64)
    runs, values = t["runs"], t["ppm"]
    if len(runs) % 2:
        raise ValueError(f"heat map runs must come in (start, length) pairs, got {len(runs)} numbers")
    at = 0
    for start, length in zip(runs[0::2], runs[1::2], strict=True):
        if start < 0 or length <= 0 or start + length > len(cells) or at + length > len(values):
            raise ValueError(f"heat map run ({start}, {length}) does not fit grid {t['grid']} and its values")
        cells[start:start + length] = values[at:at + length]
        at += length
    if at != len(values):
        raise ValueError(f"heat map has {len(values)} values for {at} cells in its runs")
    return cells


def dense_percent(t: Mapping[str, Any]) -> np.ndarray:
    """``dense`` as float64 percent of the window's time, the unit DEBS 2013 states the query in."""
    return dense(t) / (PPM / 100)


def map_at(tuples: Sequence[Mapping[str, Any]], ts: int, grid: str) -> np.ndarray:
    """The dense map (ppm) a stream of heat-map tuples in ts order says holds at event time ``ts``.

    A stream emits a map only when it changed: the map at ``ts`` is that of the
    latest tuple at or before it, and empty before the first.
    """
    latest = bisect.bisect_right(tuples, ts, key=lambda t: t["ts"])
    return dense(tuples[latest - 1]) if latest else np.zeros(grid_size(grid), dtype=np.int64)
