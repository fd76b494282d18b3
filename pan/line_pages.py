"""Line pages: a `/data` page as the publisher's own tuple bytes, one tuple per line.

A JSON page costs its reader one ``orjson.loads`` into a dict per tuple, and a
reader that only stores or forwards the tuples (the replay's recorder, a shell
pipe) then encodes every dict again: most of such a reader's CPU. Ring buffers
already hold every tuple JSON-encoded, so a reader that sends
``Accept: application/x-ndjson`` gets those bytes as they are:

* one header line, the JSON page without its ``tuples``, plus ``count`` (the
  tuples that follow) and either ``start`` (the first tuple's index; the rest
  follow on without holes) or ``indices`` (every tuple's index);
* then ``count`` lines, one encoded tuple each.

``POST /pages`` answers the pages of all its queries one after another in the
same form (a refused query is a header line with ``status: error`` and no
tuples). Compact JSON never holds a raw newline, so a line is a tuple.

A reader of line pages gets each tuple as bytes it does not decode: it trusts
the publisher for their content, while the header (indices, ``last``,
``meta``) is checked as a JSON page's is.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import orjson

LINES_TYPE = "application/x-ndjson"
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
    head = b'{"status":"ok","count":%d,%s%s}' % (len(items), where, header)
    return b"\n".join([head, *items, b""])  # one copy of the tuples: ``+`` on a page of megabytes copies it again


def json_lines(items: list[Any], encoded: bool) -> bytes:
    """Tuples as JSON lines, each ending in a newline: their bytes as given (``encoded``), else each encoded.
    One join, one copy: ``+ b"\\n"`` on a batch of megabytes would copy it again."""
    return b"\n".join([*(items if encoded else map(orjson.dumps, items)), b""])


def decode(body: bytes, pages: int | None = None) -> list[dict[str, Any]]:
    """The pages of a body: each header's fields, with ``tuples`` (bytes) and ``indices``; ``PageFormatError``
    for anything else. ``pages``: how many the body must hold (a ``POST /pages`` answer), else exactly one."""
    lines = body.split(b"\n")
    if lines[-1]:
        raise PageFormatError("the body does not end with a newline")
    end = len(lines) - 1
    out: list[dict[str, Any]] = []
    at = 0
    while at < end:
        header = _header(lines[at])
        count = header.get("count", 0)
        if header.get("status") != "ok":
            if count:
                raise PageFormatError("an error page carries tuples")
            out.append(header)
            at += 1
            continue
        if type(count) is not int or not 0 <= count <= end - at - 1:
            raise PageFormatError(f"'count' {count!r} does not match the lines that follow")
        tuples = lines[at + 1 : at + 1 + count]
        header["tuples"], header["indices"] = tuples, _indices(header, count)
        if not all(tuples):
            raise PageFormatError("an empty tuple line")
        out.append(header)
        at += 1 + count
    expected = 1 if pages is None else pages
    if len(out) != expected:
        raise PageFormatError(f"expected {expected} page(s), got {len(out)}")
    return out


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


def _indices(header: dict[str, Any], count: int) -> list[int]:
    """The tuples' indices: from ``start`` on, or as listed in ``indices`` (increasing integers)."""
    start, indices = header.pop("start", None), header.get("indices")
    if indices is None:
        if count and type(start) is not int:
            raise PageFormatError("a page with tuples has neither an integer 'start' nor 'indices'")
        return list(range(start, start + count)) if count else []
    if (not isinstance(indices, list) or len(indices) != count or not all(type(i) is int for i in indices)
            or any(b <= a for a, b in pairwise(indices))):
        raise PageFormatError("'indices' must list the tuples' indices, increasing")
    return indices
