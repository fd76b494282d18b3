"""A ring buffer of integer rows held as numbers, read as their stored JSON tuples.

The streams a forwarder fills from integer CSV hold most of a peer's
buffered tuples. Held as one JSON ``bytes`` each, a tuple of 13 integers
costs about 200 bytes of memory; as a row of values, 8 bytes for ``ts`` and 4
for each other field while they fit 32 bits (56 for 13 fields; 8 for each
field once a value needs more).

Readers still get the tuples as JSON bytes, byte-identical to what a plain
``RingBuffer[bytes]`` would hold. The newest ``hot`` tuples keep the bytes the
ingest rendered anyway (live readers read there, at no cost); an older one is
rendered again from its row when a reader asks for it (a lagging or a new
reader pays for what it reads).

Index arithmetic, waiting and reading are the base class's; only storage
differs. The ring takes no explicit indices, so it never has holes: it
belongs to a stream whose producer numbers its own tuples (a forwarder).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from pan.buffers.ringbuffer import RingBuffer, write_wrapped
from pan.buffers.row_store import RowTable
from pan.buffers.streams import DEFAULT_BUFFER_BYTES, DEFAULT_BUFFER_SIZE, PAGE_BYTES, OutputStream
from pan.wire.int_csv import IntCsvLayout, render_indexed
from pan.wire.progress import EMPTY, StreamProgress

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1

#: The newest tuples of a stream kept as bytes too: a sixteenth of its capacity, within these bounds. A live
#: subscriber is a page or two behind, at most a few hundred tuples (``MIN_HOT``). A reader behind the kept
#: bytes makes the stream render its tuples again from their rows, though the ingest has rendered them once
#: already (about 1 us a row either way): an unpaced replay's recorder, seconds behind a 2 kHz stream,
#: did so for nearly every row with only 256 kept. A sixteenth adds at most about 12 bytes to each
#: buffered tuple's 56-60.
MIN_HOT, MAX_HOT, HOT_SHARE = 256, 8192, 16


def hot_rows_for(capacity: int) -> int:
    """How many of the newest tuples a ring of ``capacity`` rows keeps as bytes."""
    return min(capacity, MAX_HOT, max(MIN_HOT, capacity // HOT_SHARE))


class IntColumnRing(RingBuffer[bytes]):
    """``RingBuffer[bytes]`` whose items are the JSON tuples of integer rows of ``layout`` (index in ``i``)."""

    def __init__(self, capacity: int, layout: IntCsvLayout, hot: int | None = None) -> None:
        super().__init__(1)  # the base's slots are not used: rows live in ``_ts`` and ``_values``, bytes in ``_hot``
        self.capacity = capacity
        self.layout = layout
        self.width = len(layout.fields)
        self._others = [column for column in range(self.width) if column != layout.ts_column]
        self._others_in_page = np.array(self._others, dtype=np.intp) + 1  # (after the index, in ``indexed_rows``)
        # Pages of an np.empty array become resident as rows are written: an unfilled ring costs no memory.
        # ts (picoseconds) needs 64 bits; the other columns take 32 until a value does not fit (``_widen``).
        self._ts = np.empty(capacity, dtype=np.int64)
        self._values = np.empty((capacity, len(self._others)), dtype=np.int32)
        self.hot = hot_rows_for(capacity) if hot is None else min(hot, capacity)
        self._hot: list[bytes | None] = [None] * self.hot
        self._hot_from = 0  # the oldest index whose encoding was kept (a truncation or reset forgets the rest)
        self.rendered_again = 0  # tuples read from rows, beyond the hot ones: what lagging readers cost

    @property
    def row_bytes(self) -> int:
        """Memory of one held row."""
        return 8 + self._values.dtype.itemsize * len(self._others)

    # --- writing ---------------------------------------------------------------

    def append(self, item: bytes, index: int | None = None) -> int:
        raise TypeError("an IntColumnRing takes rows with their encodings (extend_rows), not bytes alone")

    def extend(self, items: list[bytes]) -> None:
        raise TypeError("an IntColumnRing takes rows with their encodings (extend_rows), not bytes alone")

    def extend_rows(self, rows: np.ndarray, encoded: list[bytes]) -> None:
        """Append ``rows`` (one int64 row of ``layout`` each) with consecutive indices; ``encoded``: the stored
        tuples (the layout's JSON of each row with its index) of the newest rows, at least ``hot`` of them (or
        all), kept for the newest ``hot``: the caller need not render what would be dropped at once."""
        count = len(rows)
        if rows.shape != (count, self.width) or not min(count, self.hot) <= len(encoded) <= count:
            raise ValueError(f"expected {count} rows of {self.width} values and the encodings of the newest")
        if count == 0:
            return
        start = self._next
        kept = min(count, self.capacity)
        others = rows[count - kept :, self._others]
        if self._values.dtype != np.int64 and others.size and (others.min() < _INT32_MIN or others.max() > _INT32_MAX):
            self._widen()
        write_wrapped(self._ts, start + count - kept, rows[count - kept :, self.layout.ts_column])
        write_wrapped(self._values, start + count - kept, others)
        hot = min(count, self.hot)
        write_wrapped(self._hot, start + count - hot, encoded[len(encoded) - hot :])
        self._appended(count)

    def resize(self, capacity: int) -> None:
        self._check_fits(capacity)
        ts = np.empty(capacity, dtype=np.int64)
        values = np.empty((capacity, len(self._others)), dtype=self._values.dtype)
        if len(self):
            held = _positions(self._first, self._next, self.capacity)
            write_wrapped(ts, self._first, self._ts[held])
            write_wrapped(values, self._first, self._values[held])
        hot = self.hot_items(self._next - self.hot, self._next)
        self._ts, self._values, self.capacity = ts, values, capacity
        self.hot = min(self.hot, capacity)
        self._hot = [None] * self.hot
        write_wrapped(self._hot, self._next - len(hot[-self.hot :]), hot[-self.hot :])

    def _widen(self) -> None:
        """Hold the other columns as int64 from now on (a value beyond 32 bits came): a copy of the held rows
        (only their pages of the wider array become resident)."""
        wide = np.empty(self._values.shape, dtype=np.int64)
        if len(self):
            held = _positions(self._first, self._next, self.capacity)
            wide[held] = self._values[held]
        self._values = wide

    def drop_before(self, index: int) -> None:
        index = min(index, self._next - 1)
        if index > self._first:
            self._first = index  # the rows stay in memory until overwritten: the array is allocated anyway

    def truncate_after(self, index: int) -> None:
        if index + 1 >= self._next:
            return
        self._next = index + 1
        self._first = min(self._first, self._next)
        self._hot_from = self._next
        self.poke()

    def reset(self, start_index: int = 0) -> None:
        self._first = self._next = self._hot_from = start_index
        self._wake()

    def _skip_to(self, index: int) -> None:
        raise ValueError("an IntColumnRing has no holes: its producer numbers every tuple")

    # --- reading ---------------------------------------------------------------

    def at(self, index: int) -> bytes | None:
        if not self._first <= index < self._next:
            return None
        return self._slice(index, index + 1)[0]

    def _slice(self, start: int, end: int) -> list[bytes]:
        """The stored tuples of indices [start, end): the hot ones as kept, older ones rendered from their rows."""
        if start >= end:
            return []
        hot_from = max(self._next - self.hot, self._hot_from)
        items: list[bytes] = []
        if start < hot_from:
            cold_end = min(end, hot_from)
            items = render_indexed(self.layout, self.indexed_rows(start, cold_end))
            self.rendered_again += len(items)
            start = cold_end
        if start < end:
            items += self.hot_items(start, end)
        return items

    def hot_items(self, start: int, end: int) -> list[bytes]:
        """The kept encodings of indices [start, end) within the hot ones (clipped to them)."""
        start = max(start, self._next - self.hot, self._first, self._hot_from)
        if start >= end:
            return []
        hot = self.hot
        lo, hi = start % hot, end % hot
        items = self._hot[lo : hi or hot] if lo < hi or hi == 0 else self._hot[lo:] + self._hot[:hi]
        return items  # type: ignore[return-value]

    def rows(self, start: int, end: int) -> np.ndarray:
        """The int64 rows of indices [start, end), which must be held (a copy)."""
        return self.indexed_rows(start, end)[:, 1:]

    def indexed_rows(self, start: int, end: int) -> np.ndarray:
        """``rows`` with each row's index before its fields: the columns of a page (``i`` and the layout's)."""
        if start < self._first or end > self._next:
            raise IndexError(f"rows {start}..{end - 1} are not all held ({self.first}..{self.last})")
        positions = _positions(start, end, self.capacity)
        rows = np.empty((end - start, self.width + 1), dtype=np.int64)
        rows[:, 0] = np.arange(start, end)
        rows[:, 1 + self.layout.ts_column] = self._ts[positions]
        rows[:, self._others_in_page] = self._values[positions]
        return rows


def _positions(start: int, end: int, capacity: int) -> np.ndarray:
    """Ring positions of indices [start, end)."""
    return np.arange(start, end) % capacity


class ColumnOutputStream(OutputStream):
    """An output stream whose tuples are integer rows of ``layout`` held as numbers (an ``IntColumnRing``): a
    forwarder's stream of integer CSV rows. It takes rows with their encodings (``extend_rows``) and serves
    pages like any other."""

    def __init__(
        self, name: str, layout: IntCsvLayout, capacity: int = DEFAULT_BUFFER_SIZE, progress: StreamProgress = EMPTY,
        byte_budget: int = DEFAULT_BUFFER_BYTES,
    ) -> None:
        super().__init__(name, 1, progress, byte_budget)
        self.buffer = IntColumnRing(capacity, layout)
        self.base_capacity = capacity
        self._page_names = ("i", *layout.fields)

    def extend_rows(self, rows: np.ndarray, encoded: list[bytes]) -> None:
        """Append ``rows`` with indices from ``next_index`` on; ``encoded``: the stored tuples (with their indices,
        as ``extend_encoded`` takes them) of at least the newest ``hot_rows`` of them. The byte budget counts each
        row's memory (``row_bytes``)."""
        if self._holders:
            self._make_room(len(rows))
        self.buffer.extend_rows(rows, encoded)
        self.appended += len(rows)
        self._account([self.buffer.row_bytes] * len(rows))

    @property
    def hot_rows(self) -> int:
        """How many of the newest tuples keep their JSON: ``extend_rows`` needs no encodings of older ones."""
        return self.buffer.hot

    def arrow_page(self, after: int, *, oldest: int | None, latest: int | None) -> bytes | None:
        """The page ``render`` answers for the same read, as an Arrow IPC stream made from the rows (no JSON in
        between); None where this stream has a settled view or retractions (``render`` serves those).

        The page holds at most ``PAGE_BYTES`` of columns where the JSON page holds at most ``PAGE_BYTES`` of
        JSON: a reader of either gets the same tuples, indices and ``missed``, in pages of other sizes.
        """
        from pan.wire import arrow_pages

        read = self._row_read(after, oldest, latest)
        if read is None:
            return None
        rows, missed = read
        header = b'{"status":"ok","stream":%b,"first":%d,"last":%d,"missed":%d,"meta":%b}' % (
            self._name_json, self.buffer.first, self.buffer.last, missed, self._meta_json())
        return arrow_pages.encode_int_columns(header, self._page_names, list(rows.T))

    def row_page(self, after: int, *, oldest: int | None, latest: int | None) -> dict[str, Any] | None:
        """``arrow_page``'s page for a reader in this process, decoded already: its ``tuples`` are the rows
        themselves (a ``RowTable``, pan/buffers/row_store.py), ``indices`` their indices. No encoding, no decoding:
        the rows are gathered from the ring once, into the table the reader's row store keeps."""
        read = self._row_read(after, oldest, latest)
        if read is None:
            return None
        rows, missed = read
        page = {"status": "ok", "stream": self.name, "first": self.buffer.first, "last": self.buffer.last,
                "missed": missed, "meta": orjson.loads(self._meta_json())}
        if len(rows):
            page["tuples"], page["indices"] = RowTable(self._page_names, rows), rows[:, 0].tolist()
        else:
            page["tuples"], page["indices"] = [], []
        return page

    def _row_read(self, after: int, oldest: int | None, latest: int | None) -> tuple[np.ndarray, int] | None:
        """The rows (index first) a page of this read holds and how many tuples it missed; None where this
        stream has a settled view or retractions."""
        if self.settled is not None or self.retractions:
            return None
        if latest is None:
            oldest = self.arrow_page_rows if oldest is None else min(oldest, self.arrow_page_rows)
        start, end, missed = self.buffer.span(after, oldest=oldest, latest=latest)  # (the ring has no holes)
        self.requests += 1
        self.served_tuples += end - start
        return self.buffer.indexed_rows(start, end), missed

    @property
    def arrow_page_rows(self) -> int:
        """Tuples in an Arrow page at most: ``PAGE_BYTES`` of int64 columns."""
        return max(1, PAGE_BYTES // (8 * (self.buffer.width + 1)))

    def counters(self) -> dict[str, Any]:
        """The stream's counters, and how many tuples readers had rendered again from rows (``rendered_again``)."""
        return {**super().counters(), "rendered_again": self.buffer.rendered_again, "row_bytes": self.buffer.row_bytes}
