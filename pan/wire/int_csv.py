"""Blocks of integer CSV lines parsed together with numpy, and their tuples rendered in one pass.

Per-line ingest pays a regular expression, a split and a Python ``int`` per
field for every row (``pan.ingest.decoders.RowDecoder.decode``). A decoder whose
lines are plain integer CSV (``IntCsvLayout``) lets the ingest server parse
all the complete lines of one read at once instead: byte checks, field
bounds and values are numpy arrays over the whole block.

The block parser only takes the lines it is *sure* the per-line decoder
would accept and store the same way: exactly the layout's number of fields,
each ``-?[0-9]+`` with at most 18 digits (so within int64 without checking),
written canonically (no leading zero, no ``-0``: their text is then the JSON
text of their value), within the row size limit, with a non-negative ts (and,
checked by the server, a key whose stream it expects). Every other line (JSON,
promises, blank, CR, odd field counts, long numbers, ...) is left to the
per-line path, which counts and logs what it refuses exactly as before.

Rendering copies each field's digits straight from the received bytes
between the layout's JSON names: one ``%`` format (a few rows) or one numpy
gather (many rows) for all the rows of a stream, then one ``bytes.split``
gives the stored tuples.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import overload

import numpy as np
import orjson

#: Longest field the block parser takes, in digits: 10**18 - 1 < 2**63 - 1, so no range check is needed.
MAX_DIGITS = 18
_POW10 = 10 ** np.arange(MAX_DIGITS + 1, dtype=np.int64)
_NEWLINE, _COMMA, _MINUS, _ZERO = 10, 44, 45, 48
_CSV_BYTES = b"0123456789,-"
_INDEX_WIDTH = 20  # digits of the largest index an int64 holds, and then some


@dataclass(frozen=True)
class IntCsvLayout:
    """Lines of ``len(fields)`` comma-separated int64 values, stored as ``{"i":<index>,"<field>":<value>,...}``.

    ``key_column`` names the stream of a line (``RowDecoder.stream_of_key``); ``ts_column`` is its ts.
    """

    fields: tuple[str, ...]
    key_column: int
    ts_column: int

    def json_format(self) -> bytes:
        """The stored tuple as a %-format of the index and the row's values (what a decoder's ``encode`` does)."""
        names = [orjson.dumps(name) for name in ("i", *self.fields)]
        return b"{" + b",".join(name + b":%d" for name in names) + b"}"

    def templates(self) -> list[bytes]:
        """The constant pieces of a stored tuple: before the index, before each value, and the end of the line."""
        names = [orjson.dumps(name) for name in self.fields]
        return [b'{"i":', *(b"," + name + b":" for name in names), b"}\n"]

    @cached_property
    def row_template(self) -> bytes:
        """The stored tuple and a newline as a %-format of the index (``%d``) and each field's digits (``%b``)."""
        return self._line_template(b"%b")

    @cached_property
    def values_template(self) -> bytes:
        """The stored tuple and a newline as a %-format of the index and each field's value (all ``%d``)."""
        return self._line_template(b"%d")

    def _line_template(self, field: bytes) -> bytes:
        names = [orjson.dumps(name).replace(b"%", b"%%") for name in self.fields]
        return b'{"i":%d' + b"".join(b"," + name + b":" + field for name in names) + b"}\n"


@dataclass
class ParsedBlock:
    """The lines of one read that the block parser took, with their columns.

    ``data`` holds whole lines, all of them ``-?[0-9]+`` fields (the received
    block itself, or a copy without the lines it could not read). ``taken``
    gives, per line it took, its number among the received lines, in arrival
    order; ``values``, ``starts`` and ``ends`` have one row per taken line and
    one column per field (``starts``/``ends``: the field's bounds in ``data``).
    """

    data: bytes
    taken: np.ndarray
    values: np.ndarray
    starts: np.ndarray
    ends: np.ndarray


def _readable_lines(data: bytes, numbers: np.ndarray | None, keep: object) -> tuple[bytes, np.ndarray]:
    """The lines of ``data`` that ``keep(line)`` admits, joined again, and their received line numbers."""
    lines = data.split(b"\n")
    lines.pop()  # after the last newline
    kept = [n for n, line in enumerate(lines) if keep(line)]  # type: ignore[operator]
    picked = np.array(kept, dtype=np.int64)
    return b"".join([lines[n] + b"\n" for n in kept]), picked if numbers is None else numbers[picked]


def _fields(buf: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Every field's bounds as (starts, ends), a row per line; None unless every line has ``width`` fields.

    The separators, cut into groups of ``width``, must be as many groups as lines, each ending with a newline:
    then no group holds a newline inside (two lines of 6 and 7 fields are not one line of 13).
    """
    separators = np.flatnonzero((buf == _COMMA) | (buf == _NEWLINE))
    if len(separators) != width * np.count_nonzero(buf == _NEWLINE):  # as many groups as lines, and below
        return None
    ends = separators.reshape(-1, width)
    if len(ends) and not (buf[ends[:, -1]] == _NEWLINE).all():
        return None
    starts = np.empty_like(ends)
    if len(ends):
        starts.flat[0] = 0
        starts.flat[1:] = separators[:-1] + 1
    return starts, ends


def parse_block(data: bytes, layout: IntCsvLayout, max_row_bytes: int) -> ParsedBlock:
    """Parse the lines of ``data`` (whole lines, each ending in a newline) that the block path can take.

    A clean block (the usual case) is checked with a few passes over its
    bytes; only a block with other lines in it is split into lines in Python,
    to drop those.
    """
    width = len(layout.fields)
    numbers: np.ndarray | None = None  # None: data still holds every received line
    if data.translate(None, _CSV_BYTES + b"\n"):  # JSON, CR, spaces, ...: keep the lines of only CSV bytes
        data, numbers = _readable_lines(data, numbers, lambda line: not line.translate(None, _CSV_BYTES))
    buf = np.frombuffer(data, dtype=np.uint8)
    bounds = _fields(buf, width)
    if bounds is None:  # a line with another number of fields, or a blank one
        data, numbers = _readable_lines(data, numbers, lambda line: line and line.count(b",") == width - 1)
        buf = np.frombuffer(data, dtype=np.uint8)
        bounds = _fields(buf, width)
        assert bounds is not None
    starts, ends = bounds
    negative = buf[starts] == _MINUS  # a field never starts at the very end: its separator follows
    digits = ends - starts - negative
    if len(ends) and ((digits < 1).any() or negative.sum() != data.count(b"-")):  # "", "-", or "1-2" somewhere
        minus_lines = np.searchsorted(ends[:, -1], np.flatnonzero(buf == _MINUS))
        fine = (digits >= 1).all(axis=1) & (np.bincount(minus_lines, minlength=len(ends)) == negative.sum(axis=1))
        fine_lines = set(np.flatnonzero(fine).tolist())
        line_numbers = iter(range(len(ends)))
        data, numbers = _readable_lines(data, numbers, lambda _line: next(line_numbers) in fine_lines)
        buf = np.frombuffer(data, dtype=np.uint8)
        bounds = _fields(buf, width)
        assert bounds is not None
        starts, ends = bounds
        negative = buf[starts] == _MINUS
        digits = ends - starts - negative
    if numbers is None:
        numbers = np.arange(len(ends), dtype=np.int64)
    if not len(ends):
        empty = np.empty((0, width), dtype=np.int64)
        return ParsedBlock(data, numbers, empty, empty, empty)
    # Every field is -?[0-9]+ now: numpy's C reader takes them all (beyond int64 it saturates: refused below).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        values = np.fromstring(data.replace(b"\n", b","), dtype=np.int64, sep=",")
    if values.size != ends.size:  # the reader stopped early (it should not): leave every line to the per-line path
        empty = np.empty((0, width), dtype=np.int64)
        return ParsedBlock(data, numbers[:0], empty, empty, empty)
    values = values.reshape(-1, width)
    first = buf[starts + negative]
    ok = (
        (digits <= MAX_DIGITS).all(axis=1)
        & ~((first == _ZERO) & ((digits > 1) | negative)).any(axis=1)  # canonical: no leading zero, no -0
        & (ends[:, -1] - starts[:, 0] <= max_row_bytes)
        & (values[:, layout.ts_column] >= 0)
    )
    if ok.all():
        return ParsedBlock(data, numbers, values, starts, ends)
    return ParsedBlock(data, numbers[ok], values[ok], starts[ok], ends[ok])


class RowBlock(Sequence[list[int]]):
    """Rows of one stream taken from one parsed block, in arrival order; reads as lists of ints.

    The forwarder stores them all at once with ``encode`` rather than row by row.
    """

    __slots__ = ("block", "layout", "picks")

    def __init__(self, block: ParsedBlock, picks: np.ndarray, layout: IntCsvLayout) -> None:
        self.block = block
        self.picks = picks  # rows of block.values
        self.layout = layout

    def __len__(self) -> int:
        return len(self.picks)

    @overload
    def __getitem__(self, item: int) -> list[int]: ...
    @overload
    def __getitem__(self, item: slice) -> list[list[int]]: ...
    def __getitem__(self, item: int | slice) -> list[int] | list[list[int]]:
        return self.block.values[self.picks[item]].tolist()  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.block.values[self.picks].tolist())

    @property
    def ts(self) -> np.ndarray:
        return self.block.values[self.picks, self.layout.ts_column]

    @property
    def lines(self) -> np.ndarray:
        """The received line numbers of these rows."""
        return self.block.taken[self.picks]

    def encode(self, start: int) -> list[bytes]:
        """The stored tuples, indices from ``start`` on: byte-identical to the layout's ``json_format``."""
        index = np.arange(start, start + len(self.picks), dtype=np.int64)
        return render(self.block, self.layout, self.picks, index)


def newest_rows(rows: Sequence[list[int]], count: int) -> Sequence[list[int]]:
    """The newest ``count`` of ``rows`` (a parsed block's stay one, to be rendered in one pass)."""
    if len(rows) <= count:
        return rows
    if type(rows) is RowBlock:
        return RowBlock(rows.block, rows.picks[len(rows) - count :], rows.layout)
    return rows[len(rows) - count :]


def int_rows(rows: Sequence[list[int]], width: int) -> np.ndarray:
    """Rows of ``width`` int64 values (a decoder's checked rows, or a parsed block's) as one int64 array."""
    if type(rows) is RowBlock:
        return rows.block.values[rows.picks]
    return np.array(rows, dtype=np.int64).reshape(len(rows), width)


def encode_blocks(rows: Sequence[RowBlock], starts: Sequence[int]) -> list[list[bytes]]:
    """The stored tuples of several streams' rows from the same block, each from its own start index.

    One render for all of them: a block of many streams costs one pass, not one per stream.
    """
    if not rows:
        return []
    block, layout = rows[0].block, rows[0].layout
    assert all(r.block is block for r in rows)
    picks = np.concatenate([r.picks for r in rows])
    index = np.concatenate([np.arange(start, start + len(r.picks), dtype=np.int64)
                            for r, start in zip(rows, starts, strict=True)])
    tuples = render(block, layout, picks, index)
    out, at = [], 0
    for r in rows:
        out.append(tuples[at : at + len(r.picks)])
        at += len(r.picks)
    return out


#: Up to this many rows a read's tuples are rendered by one %-format, beyond by a numpy gather: the gather's
#: fixed cost (a few dozen numpy calls) pays from about 300 rows on (`pan bench ingest`; 100 rows: 1.6 against
#: 2.6 us a row, 4,000 rows: 1.7 against 1.0).
FORMAT_MAX_ROWS = 256


def render(block: ParsedBlock, layout: IntCsvLayout, picks: np.ndarray, index: np.ndarray) -> list[bytes]:
    """Rows ``picks`` of ``block`` as stored tuples with the given indices, byte-identical to ``json_format``.

    Each tuple is constant text between its index's digits and its fields' digits, copied as received.
    """
    if len(picks) == 0:
        return []
    if len(picks) <= FORMAT_MAX_ROWS:
        return _render_format(block, layout, picks, index)
    return _render_gather(block, layout, picks, index)


def _render_format(block: ParsedBlock, layout: IntCsvLayout, picks: np.ndarray, index: np.ndarray) -> list[bytes]:
    """``render`` for a few rows: the picked lines joined and split at their commas give every field, which
    one ``%`` format of the tuple template repeated per row interleaves with the indices (C loops only)."""
    count = len(picks)
    width = len(layout.fields)
    data = block.data
    if count == len(block.values) == data.count(b"\n") and (picks[1:] > picks[:-1]).all():
        fields = data[:-1].replace(b"\n", b",").split(b",")  # every line of the read, in order
    else:
        lines = zip(block.starts[picks, 0].tolist(), block.ends[picks, -1].tolist(), strict=True)
        fields = b",".join([data[start:end] for start, end in lines]).split(b",")
    values: list[object] = [None] * (count * (width + 1))
    values[:: width + 1] = index.tolist()
    for column in range(width):
        values[column + 1 :: width + 1] = fields[column::width]
    tuples = (layout.row_template * count % tuple(values)).split(b"\n")
    tuples.pop()  # after the last newline
    return tuples


def _render_gather(block: ParsedBlock, layout: IntCsvLayout, picks: np.ndarray, index: np.ndarray) -> list[bytes]:
    """``render`` for many rows: every tuple is pieces of constant text, its index's digits and its fields'
    digits as received; the output bytes are one numpy gather from those."""
    count = len(picks)
    width = len(layout.fields)
    templates = layout.templates()
    template_blob = b"".join(templates)
    template_sizes = np.array([len(t) for t in templates], dtype=np.int64)
    template_at = len(block.data) + np.cumsum(template_sizes) - template_sizes
    # Indices as right-aligned ASCII digits, _INDEX_WIDTH bytes per row.
    index_digits = np.searchsorted(_POW10, index, side="right").clip(min=1)
    digit_rows = np.full((count, _INDEX_WIDTH), _ZERO, dtype=np.uint8)
    remaining = index
    for place in range(int(index_digits.max())):
        digit_rows[:, _INDEX_WIDTH - 1 - place] += (remaining % 10).astype(np.uint8)
        remaining = remaining // 10
    source = np.concatenate([
        np.frombuffer(block.data, dtype=np.uint8),
        np.frombuffer(template_blob, dtype=np.uint8),
        digit_rows.ravel(),
    ])
    digits_at = len(block.data) + len(template_blob)
    # Pieces of a tuple: template 0, the index, (template k+1, field k) per field, the closing template.
    pieces = 2 * width + 3
    piece_start = np.empty((count, pieces), dtype=np.int64)
    piece_size = np.empty((count, pieces), dtype=np.int64)
    field_starts = block.starts[picks]
    piece_start[:, 0], piece_size[:, 0] = template_at[0], template_sizes[0]
    piece_start[:, 1] = digits_at + np.arange(count) * _INDEX_WIDTH + _INDEX_WIDTH - index_digits
    piece_size[:, 1] = index_digits
    piece_start[:, 2:-1:2] = template_at[1:-1]
    piece_size[:, 2:-1:2] = template_sizes[1:-1]
    piece_start[:, 3::2] = field_starts
    piece_size[:, 3::2] = block.ends[picks] - field_starts
    piece_start[:, -1], piece_size[:, -1] = template_at[-1], template_sizes[-1]
    # Source offsets of every output byte: +1 within a piece, a jump at each piece's first byte (no piece
    # is empty); one running sum makes them.
    starts, sizes = piece_start.ravel(), piece_size.ravel()
    written = np.cumsum(sizes)
    steps, out = _SCRATCH.arrays(int(written[-1]))
    steps.fill(1)
    steps[0] = starts[0]
    steps[written[:-1]] = starts[1:] - (starts[:-1] + sizes[:-1] - 1)
    np.cumsum(steps, out=steps)
    np.take(source, steps, out=out)
    tuples = out.tobytes().split(b"\n")
    tuples.pop()  # after the last newline
    return tuples


#: Rows per ``%`` format in ``render_values``: one format string of 10,000 rows formats 1.6x slower per row than
#: pieces of 256-1,024 (measured on rows of 13 fields; smaller pieces pay the per-call cost).
VALUES_CHUNK = 512


def render_values(layout: IntCsvLayout, start: int, rows: np.ndarray) -> list[bytes]:
    """Int64 ``rows`` of ``layout`` as stored tuples with indices from ``start`` on (``json_format``'s bytes)."""
    table = np.empty((len(rows), len(layout.fields) + 1), dtype=np.int64)
    table[:, 0] = np.arange(start, start + len(rows))
    table[:, 1:] = rows
    return render_indexed(layout, table)


def render_indexed(layout: IntCsvLayout, table: np.ndarray) -> list[bytes]:
    """Int64 rows of the index and then ``layout``'s fields as stored tuples.

    For rows held as values rather than as received text (pan/buffers/column_ring.py): per ``VALUES_CHUNK`` rows, one
    ``%`` format of the tuple template repeated per row, over the indices and values flattened into one tuple.
    """
    tuples: list[bytes] = []
    for at in range(0, len(table), VALUES_CHUNK):
        piece = table[at : at + VALUES_CHUNK]
        tuples += (layout.values_template * len(piece) % tuple(piece.ravel().tolist())).split(b"\n")
        tuples.pop()  # after the last newline
    return tuples


class _Scratch:
    """The render's two big arrays, kept between calls: fresh ones of a few MB cost more in page faults
    than the work done in them. (Ingest runs on one thread; the arrays never leave ``render``.)"""

    def __init__(self) -> None:
        self._steps = np.empty(0, dtype=np.int64)
        self._out = np.empty(0, dtype=np.uint8)

    def arrays(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        if len(self._steps) < size:
            self._steps = np.empty(size, dtype=np.int64)
            self._out = np.empty(size, dtype=np.uint8)
        return self._steps[:size], self._out[:size]


_SCRATCH = _Scratch()
