"""Line pages: a `/data` page as the publisher's own tuple bytes, one tuple per line.

A JSON page costs its reader one ``orjson.loads`` into a dict per tuple, and a
reader that only stores or forwards the tuples (the replay's recorder, a shell
pipe) then encodes every dict again: most of such a reader's CPU. Ring buffers
already hold every tuple JSON-encoded, so a reader that sends
``Accept: application/x-ndjson`` gets those bytes as they are:

* one header line, the JSON page without its ``tuples``, plus ``count`` (the
  tuples that follow), ``bytes`` (their length, newlines included) and either
  ``start`` (the first tuple's index; the rest follow on without holes) or
  ``indices`` (every tuple's index);
* then ``count`` lines, one encoded tuple each.

``POST /pages`` answers the pages of all its queries one after another in the
same form (a refused query is a header line with ``status: error`` and no
tuples). Compact JSON never holds a raw newline, so a line is a tuple.

A reader of line pages gets each tuple as bytes it does not decode: it trusts
the publisher for their content, while the header (indices, ``last``,
``meta``) is checked as a JSON page's is. Thanks to ``bytes`` a page's tuples
are cut out of the answer by length (views of the chunks it arrived in,
`Lines`) and split into tuples only for a reader that asks for one: a recorder
writes them as they came. A page without ``bytes`` (an older publisher) is
split at once.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator, Sequence
from itertools import accumulate, pairwise
from typing import Any, BinaryIO, overload

import numpy as np
import orjson

LINES_TYPE = "application/x-ndjson"
NEWLINE = ord("\n")
NUMPY_COUNT_FROM = 1 << 16  # bytes
#: What a reader of line pages sends: a publisher without them may answer JSON.
ACCEPT = f"{LINES_TYPE}, application/json;q=0.5"


class PageFormatError(ValueError):
    """A body that is not a well-formed line page."""


def render(header: bytes, items: list[bytes], indices: list[int]) -> bytes:
    """One line page: ``header`` is the JSON page's fields after ``tuples`` (``"first":...``, no braces)."""
    if not items:
        where = b""
    elif indices[-1] - indices[0] + 1 == len(indices):
        where = b'"start":%d,' % indices[0]
    else:
        where = b'"indices":' + orjson.dumps(indices) + b","
    size = sum(map(len, items)) + len(items)  # a C loop; the newlines included
    head = b'{"status":"ok","count":%d,"bytes":%d,%s%s}' % (len(items), size, where, header)
    return b"\n".join([head, *items, b""])  # one copy of the tuples: ``+`` on a page of megabytes copies it again


class Lines(Sequence[bytes]):
    """A line page's tuples as the pieces of the answer they came in (views, each line ending in a newline),
    split into tuples on the first look at one: a reader that stores or forwards them whole (`write`) never
    splits them, nor copies them."""

    __slots__ = ("_count", "_items", "parts")

    def __init__(self, parts: list[memoryview] | list[bytes], count: int) -> None:
        self.parts = parts
        self._count = count
        self._items: list[bytes] | None = None

    @property
    def body(self) -> bytes:
        """The tuple lines as one piece of bytes (a copy)."""
        return b"".join(self.parts)

    def items(self) -> list[bytes]:
        """Each tuple's bytes (the split is made once)."""
        if self._items is None:
            self._items = self.body.split(b"\n")
            del self._items[-1]  # after the last newline
        return self._items

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> bytes: ...
    @overload
    def __getitem__(self, index: slice) -> list[bytes]: ...
    def __getitem__(self, index: int | slice) -> bytes | list[bytes]:
        return self.items()[index]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.items())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Lines):
            return self.body == other.body
        return isinstance(other, Sequence) and self.items() == list(other)

    __hash__ = None  # type: ignore[assignment]  # a sequence compared by content, as a list is

    def __repr__(self) -> str:
        return f"Lines({self._count} tuples, {sum(map(len, self.parts))} bytes)"


def write(out: BinaryIO, items: Sequence[Any], encoded: bool) -> None:
    """Tuples written to ``out`` as JSON lines, each ending in a newline: `Lines` as the pieces they came in
    (joined by nobody), other tuples' bytes as given (``encoded``), else each encoded. One join for those: ``+
    b"\\n"`` on a batch of megabytes would copy it again."""
    if type(items) is Lines:
        out.writelines(items.parts)
    else:
        out.write(b"\n".join([*(items if encoded else map(orjson.dumps, items)), b""]))


class _Chunks:
    """A body as the chunks it arrived in, never joined (a reader of hundreds of megabytes would pay a copy
    and, for each fresh buffer, the kernel's page faults): offsets run across the chunks."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = [chunk for chunk in chunks if chunk]
        self.starts = list(accumulate(map(len, self.chunks), initial=0))
        self.size = self.starts[-1]

    def _chunk(self, at: int) -> int:
        return bisect_right(self.starts, at) - 1

    def ends_with_newline(self) -> bool:
        return bool(self.size) and self.byte(self.size - 1) == NEWLINE

    def byte(self, at: int) -> int:
        i = self._chunk(at)
        return self.chunks[i][at - self.starts[i]]

    def newline(self, at: int) -> int:
        """The offset of the first newline at or after ``at`` (-1: none)."""
        i = self._chunk(at)
        while i < len(self.chunks):
            found = self.chunks[i].find(b"\n", at - self.starts[i])
            if found >= 0:
                return self.starts[i] + found
            i += 1
            at = self.starts[i]
        return -1

    def _ranges(self, start: int, stop: int) -> Iterator[tuple[bytes, int, int]]:
        """Bytes ``start`` to ``stop`` as (chunk, from, to) within the chunks that hold them."""
        i = self._chunk(start)
        while start < stop:
            base = self.starts[i]
            end = min(stop, self.starts[i + 1])
            yield self.chunks[i], start - base, end - base
            start, i = end, i + 1

    def views(self, start: int, stop: int) -> list[memoryview]:
        """Bytes ``start`` to ``stop`` as views of the chunks that hold them."""
        return [memoryview(chunk)[a:b] for chunk, a, b in self._ranges(start, stop)]

    def newlines(self, start: int, stop: int) -> int:
        """The newlines from ``start`` to ``stop``: numpy counts them faster than ``bytes.count`` in a long range
        (a page's decoding: 0.08 against 0.28 ns a byte; a recorder reads hundreds of megabytes), and slower in a
        short one."""
        return sum(chunk.count(b"\n", a, b) if b - a < NUMPY_COUNT_FROM
                   else int(np.count_nonzero(np.frombuffer(chunk, np.uint8, b - a, a) == NEWLINE))
                   for chunk, a, b in self._ranges(start, stop))

    def bytes(self, start: int, stop: int) -> bytes:
        return b"".join(self.views(start, stop))


def decode(body: bytes | list[bytes], pages: int | None = None) -> list[dict[str, Any]]:
    """The pages of a body (or of the chunks it came in): each header's fields, with ``tuples`` (`Lines`, or bytes
    each from a publisher that sends no ``bytes``) and ``indices``; ``PageFormatError`` for anything else.
    ``pages``: how many the body must hold (a ``POST /pages`` answer), else exactly one."""
    chunks = _Chunks([body] if isinstance(body, bytes) else body)
    if not chunks.ends_with_newline():
        raise PageFormatError("the body does not end with a newline")
    out: list[dict[str, Any]] = []
    at = 0
    while at < chunks.size:
        eol = chunks.newline(at)
        header = _header(chunks.bytes(at, eol))
        at = eol + 1
        count = header.get("count", 0)
        if header.get("status") != "ok":
            if count:
                raise PageFormatError("an error page carries tuples")
            out.append(header)
            continue
        if type(count) is not int or count < 0:
            raise PageFormatError(f"'count' {count!r} does not match the lines that follow")
        size = header.pop("bytes", None)
        tuples, at = _split(chunks, at, count) if size is None else _slice(chunks, at, count, size)
        header["tuples"], header["indices"] = tuples, _indices(header, count)
        out.append(header)
    expected = 1 if pages is None else pages
    if len(out) != expected:
        raise PageFormatError(f"expected {expected} page(s), got {len(out)}")
    return out


def _slice(chunks: _Chunks, at: int, count: int, size: Any) -> tuple[Lines, int]:
    """The ``count`` tuples of ``size`` bytes from ``at`` on. Checked with one count of the newlines, so that the
    header cannot name more or fewer tuples than follow; what the lines hold, an empty one too, is the
    publisher's, as the bytes of every tuple are."""
    stop = at + size if type(size) is int and size >= 0 else -1
    if not at <= stop <= chunks.size or (size and chunks.byte(stop - 1) != NEWLINE):
        raise PageFormatError(f"'count' {count} and 'bytes' {size!r} do not match the lines that follow")
    if chunks.newlines(at, stop) != count:
        raise PageFormatError(f"'count' {count} and 'bytes' {size!r} do not match the lines that follow")
    return Lines(chunks.views(at, stop), count), stop


def _split(chunks: _Chunks, at: int, count: int) -> tuple[list[bytes], int]:
    """The ``count`` tuples from ``at`` on, split (a page without ``bytes``)."""
    lines = chunks.bytes(at, chunks.size).split(b"\n", count)
    if len(lines) != count + 1:
        raise PageFormatError(f"'count' {count!r} does not match the lines that follow")
    rest = lines.pop()
    if not all(lines):
        raise PageFormatError("an empty tuple line")
    return lines, chunks.size - len(rest)


def from_json_page(page: dict[str, Any]) -> dict[str, Any]:
    """A decoded JSON page in the form of a decoded line page (for a publisher that answered JSON)."""
    tuples = page.get("tuples")
    if not isinstance(tuples, list):
        return page
    return {**page, "tuples": [orjson.dumps(item) for item in tuples], "indices": [item["i"] for item in tuples]}


def _header(line: bytes) -> dict[str, Any]:
    try:
        header = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise PageFormatError(f"undecodable page header: {exc}") from None
    if not isinstance(header, dict):
        raise PageFormatError("a page header is not a JSON object")
    return header


def _indices(header: dict[str, Any], count: int) -> Sequence[int]:
    """The tuples' indices: from ``start`` on (a ``range``: no list of thousands of ints), or as listed in
    ``indices`` (increasing integers)."""
    start, indices = header.pop("start", None), header.get("indices")
    if indices is None:
        if count and type(start) is not int:
            raise PageFormatError("a page with tuples has neither an integer 'start' nor 'indices'")
        return range(start, start + count) if count else []
    if (not isinstance(indices, list) or len(indices) != count or not all(type(i) is int for i in indices)
            or any(b <= a for a, b in pairwise(indices))):
        raise PageFormatError("'indices' must list the tuples' indices, increasing")
    return indices
