"""Rows of integer column batches, held for a component that computes on columns.

A component whose inputs come as Arrow record batches (``StreamSubscriber``
with ``columns``) would lose what columns save if every row became a dict
again on its way through the input buffer and the ordering unit. Instead the
rows stay in int64 tables here, and what travels through the buffer and the
unit is one int per row, its id. The unit orders ids exactly as it orders
tuples (by the ``ts`` this store looks up), and the component gathers the
released ids back into one table of the fields it computes on.

A table is let go once every one of its rows has been taken. A batch that is
not all int64 columns (a JSON-only publisher's odd rows, a value beyond
int64) is not stored: its tuples go through as dicts, as they would without
columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pan.wire import arrow_pages


@dataclass(frozen=True, slots=True)
class RowTable:
    """Int64 rows with their column names: a column buffer's page handed to a reader in the same process
    (``ColumnOutputStream.row_page``), what an Arrow page's record batch is over HTTP, without pyarrow."""

    names: tuple[str, ...]
    table: np.ndarray  # (rows, len(names)) int64

    @property
    def num_rows(self) -> int:
        return len(self.table)

    def __len__(self) -> int:
        return len(self.table)

    def slice(self, start: int) -> RowTable:
        """The rows from ``start`` on (as ``pyarrow.RecordBatch.slice``)."""
        return RowTable(self.names, self.table[start:])

    def tuples(self) -> list[dict[str, int]]:
        return [dict(zip(self.names, row, strict=True)) for row in self.table.tolist()]


@dataclass(slots=True)
class _Chunk:
    """One batch's rows: ids ``start`` .. ``start + len(table) - 1``."""

    start: int
    table: np.ndarray  # every column of the batch, int64, in the batch's column order
    names: tuple[str, ...]
    picked: np.ndarray  # positions of the store's fields among ``names``
    left: int  # rows not taken yet


class RowStore:
    """Int64 rows by id; ``take`` hands back the ``fields`` columns of the ids asked for."""

    def __init__(self, fields: Sequence[str]) -> None:
        if "ts" not in fields:
            raise ValueError("a row store needs the field 'ts' (the ordering unit orders by it)")
        self.fields = tuple(fields)
        self._ts = self.fields.index("ts")
        self._chunks: list[_Chunk] = []  # by start, rising; taken ones are dropped
        self._starts: list[int] = []
        self._next = 0
        self.rows_stored = 0
        self.batches_as_tuples = 0  # batches that could not be stored (not all int64): their tuples went as dicts

    @property
    def held(self) -> int:
        """Rows stored and not taken yet."""
        return sum(chunk.left for chunk in self._chunks)

    def add(self, batch: Any) -> list[Any]:
        """The items that stand for the rows of ``batch`` (a pyarrow record batch or a ``RowTable``), in order:
        ids, or its tuples as dicts when the batch is not all int64 columns holding the store's fields
        (``arrow_pages.batch_tuples``)."""
        if not batch.num_rows:
            return []
        if type(batch) is RowTable:
            names, table = batch.names, batch.table if set(self.fields) <= set(batch.names) else None
        else:
            names, table = tuple(batch.schema.names), self._int_table(batch)
        if table is None:
            self.batches_as_tuples += 1
            return batch.tuples() if type(batch) is RowTable else arrow_pages.batch_tuples(batch)
        picked = np.array([names.index(field) for field in self.fields], dtype=np.intp)
        start, n = self._next, len(table)
        self._next += n
        self._chunks.append(_Chunk(start, table, names, picked, n))
        self._starts.append(start)
        self.rows_stored += n
        return list(range(start, start + n))

    def _int_table(self, batch: Any) -> np.ndarray | None:
        import pyarrow as pa

        if not set(self.fields) <= set(batch.schema.names):
            return None
        if any(column.type != pa.int64() or column.null_count for column in batch.columns):
            return None
        return np.column_stack([column.to_numpy() for column in batch.columns])

    def _locate(self, ids: np.ndarray) -> np.ndarray:
        """The chunk (position in ``_chunks``) of every id."""
        return np.searchsorted(np.array(self._starts, dtype=np.int64), ids, side="right") - 1

    def take(self, ids: Sequence[int]) -> np.ndarray:
        """The ``fields`` columns of ``ids`` (in that order) as one int64 table; each id may be taken once."""
        return self._gather(ids, take=True)

    def ts(self, ids: Sequence[int]) -> list[int]:
        """The ``ts`` of each id (still held)."""
        return self.ts_array(ids).tolist()

    def ts_array(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """``ts`` as an int64 array."""
        return self._gather(ids, take=False)[:, 0]

    def tuples(self, ids: Sequence[int]) -> list[dict[str, int]]:
        """The whole tuples of ``ids`` as dicts, as a JSON page decodes them (late events, loss reports);
        they stay held."""
        out: list[dict[str, int]] = []
        at = np.asarray(ids, dtype=np.int64)
        chunks = self._locate(at)
        for chunk_no, id_ in zip(chunks.tolist(), at.tolist(), strict=True):
            chunk = self._chunks[chunk_no]
            out.append(dict(zip(chunk.names, chunk.table[id_ - chunk.start].tolist(), strict=True)))
        return out

    def _gather(self, ids: Sequence[int], *, take: bool) -> np.ndarray:
        """``take``: the fields of ``ids``, which are then taken; else their ``ts`` alone (one column)."""
        at = np.asarray(ids, dtype=np.int64)
        width = len(self.fields) if take else 1
        out = np.empty((len(at), width), dtype=np.int64)
        if not len(at):
            return out
        chunks = self._locate(at)
        present = np.unique(chunks).tolist()
        for chunk_no in present:
            chunk = self._chunks[chunk_no]
            mine = chunks == chunk_no if len(present) > 1 else slice(None)
            rows = at[mine] - chunk.start
            if take:
                out[mine] = chunk.table[rows[:, None], chunk.picked]
                chunk.left -= len(rows)
            else:
                out[mine, 0] = chunk.table[rows, chunk.picked[self._ts]]
        if take:
            self._drop_taken()
        return out

    def _drop_taken(self) -> None:
        if any(chunk.left <= 0 for chunk in self._chunks):
            self._chunks = [chunk for chunk in self._chunks if chunk.left > 0]
            self._starts = [chunk.start for chunk in self._chunks]

    def forget(self, items: Sequence[Any]) -> None:
        """``items`` will never be taken (their input buffer started over): let their rows go."""
        ids = [item for item in items if type(item) is int]
        if not ids:
            return
        at = np.asarray(ids, dtype=np.int64)
        for chunk_no, count in zip(*np.unique(self._locate(at), return_counts=True), strict=True):
            self._chunks[int(chunk_no)].left -= int(count)
        self._drop_taken()

    def counters(self) -> dict[str, int]:
        return {"rows_stored": self.rows_stored, "rows_held": self.held, "chunks_held": len(self._chunks),
                "batches_as_tuples": self.batches_as_tuples}
