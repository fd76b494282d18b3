"""The ``arrays`` param: a component computes on numpy arrays or event by event.

Both paths give byte-identical outputs; the per-event one stays as the
reference the tests compare the array path with, and ``pan bench floor``
times them side by side. Each component picks its default by what that
benchmark measured: while rows arrive as one dict each, turning a batch into
int columns costs more than the row loops of player averages, hits and the
active ball save, so those default to the per-event path
(``ARRAYS_DEFAULT``); heat maps and running analysis, which do much more per
row, default to arrays. Player averages, the active ball and hit candidates
read a forwarder's integer rows: where Arrow is on (pyarrow there,
``PAN_WIRE`` not ``json``) and ``arrays`` is not false (for hits: is true,
``COLUMN_INPUTS_UNSET``), a worker pulls them
as columns when it is behind (row ids of Arrow pages, or in process of the
rows themselves, ``pan/buffers/row_store.py``), and a large table of them goes to the
array path without any dict (``MIN_ARRAY_ROWS``).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain, groupby
from operator import itemgetter
from typing import Any, ClassVar

import numpy as np

from pan.buffers.row_store import RowStore
from pan.config.specs import WorkerSpec

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

    A component with ``COLUMN_INPUTS`` takes its inputs as columns unless ``arrays`` is false
    (``OrderedComponent.column_fields``; Arrow must be on): its batches then hold row ids of its row
    store among the tuples, and the ids' rows come out of the store as one table. A table of at least
    ``MIN_ARRAY_ROWS`` rows goes to the array path (any table with ``arrays: true``), a smaller one
    event by event, as the dicts of its ``ROW_FIELDS``: numpy's cost per call outweighs the row loop
    on the few rows of a live release.
    """

    ROW_FIELDS: ClassVar[tuple[str, ...]]  # the fields the array path takes, in its table's column order
    #: Its inputs are integer rows (a forwarder's column buffers): it can read them as columns (not with
    #: ``arrays`` false).
    COLUMN_INPUTS: ClassVar[bool] = False
    #: ... and does with ``arrays`` unset (else only with ``arrays`` true).
    COLUMN_INPUTS_UNSET: ClassVar[bool] = True
    #: The ``arrays`` default, i.e. the path of a batch of dicts: false where ``pan bench floor`` measured the
    #: row loop faster than building int columns from dicts.
    ARRAYS_DEFAULT: ClassVar[bool] = True
    #: From this many rows on, a table of row ids goes to the array path (``arrays`` unset): where the array
    #: path took less time a row than the row loop on dicts made from the table.
    MIN_ARRAY_ROWS: ClassVar[int] = 256
    arrays: bool  # the ``arrays`` param
    rows_on_arrays: int
    row_store: RowStore | None  # (OrderedComponent's)

    @classmethod
    def column_fields(cls, spec: WorkerSpec) -> tuple[str, ...] | None:
        arrays = spec.params.get(PARAM, cls.COLUMN_INPUTS_UNSET)
        return cls.ROW_FIELDS if cls.COLUMN_INPUTS and arrays is not False else None

    def process(self, events: list[Any] | np.ndarray) -> None:
        if isinstance(events, np.ndarray):  # row ids alone, released as an array
            kinds = {int}
        else:
            kinds = set(map(type, events)) if self.row_store is not None else set()
        if kinds == {int}:  # row ids alone: one table
            self._process_rows(self.row_store.take(events))  # type: ignore[union-attr]
        elif int in kinds:
            self._process_mixed(events)
        else:
            self._process_tuples(events)

    def _process_mixed(self, events: list[Any]) -> None:
        """Row ids among tuples, in order (their rows taken at once). On the array path (``arrays``, or a batch
        of ``MIN_ARRAY_ROWS``) as one table when the tuples' fields are ints too; else run by run: a run of
        ids that goes to the array path on its own, the rest together as tuples, so that ids interleaved
        with tuples (player rows between the active ball's) cost one pass, not one per run."""
        assert self.row_store is not None
        is_id = [type(item) is int for item in events]
        table = self.row_store.take([item for item, id_ in zip(events, is_id, strict=True) if id_])
        if self.arrays or len(events) >= self.MIN_ARRAY_ROWS:
            tuples = self._int_table([item for item, id_ in zip(events, is_id, strict=True) if not id_])
            if tuples is not None:
                mask = np.array(is_id)
                whole = np.empty((len(events), table.shape[1]), dtype=np.int64)
                whole[mask], whole[~mask] = table, tuples
                if self._suits(whole):
                    self._on_table(whole)
                    return
        pending: list[dict[str, Any]] = []
        at = 0
        for ids, run in groupby(events, key=_is_row_id):
            items = list(run)
            if not ids:
                pending += items
                continue
            rows = table[at:at + len(items)]
            at += len(items)
            if self._on_arrays(rows):
                if pending:
                    self._process_tuples(pending)
                    pending = []
                self._on_table(rows)
            else:
                pending += self._row_dicts(rows)
        if pending:
            self._process_tuples(pending)

    def _process_rows(self, table: np.ndarray) -> None:
        """Rows taken from the row store as one table: on the array path if it is large enough (or ``arrays``
        says so) and suits it, else event by event, as the dicts of their ``ROW_FIELDS``."""
        if self._on_arrays(table):
            self._on_table(table)
        else:
            self._process_events(self._row_dicts(table))

    def _on_table(self, table: np.ndarray) -> None:
        """The array path, counted."""
        self.rows_on_arrays += len(table)
        self._process_table(table)

    def _on_arrays(self, table: np.ndarray) -> bool:
        return (self.arrays or len(table) >= self.MIN_ARRAY_ROWS) and self._suits(table)

    def _row_dicts(self, table: np.ndarray) -> list[dict[str, Any]]:
        return [dict(zip(self.ROW_FIELDS, row, strict=True)) for row in table.tolist()]

    def _process_tuples(self, events: list[dict[str, Any]]) -> None:
        if self.arrays and events:
            table = self._int_table(events)
            if table is not None:
                self._on_table(table)
                return
        self._process_events(events)

    def _int_table(self, events: list[dict[str, Any]]) -> np.ndarray | None:
        table = int_table(events, itemgetter(*self.ROW_FIELDS))
        return table if table is not None and self._suits(table) else None

    def _suits(self, table: np.ndarray) -> bool:
        """The array path computes this table exactly (the default: any int64 table)."""
        return True

    def _process_table(self, table: np.ndarray) -> None:
        raise NotImplementedError

    def _process_events(self, events: list[dict[str, Any]]) -> None:
        raise NotImplementedError


def _is_row_id(item: Any) -> bool:
    return type(item) is int
