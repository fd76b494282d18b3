"""The `/data` request contract, validated: one query string, or the many of a ``POST /pages`` body.

`/data` and ``POST /pages`` (pan/worker/api.py) take the same parameters, so one parser reads both; a
wrong one is a ``BadRequest`` naming it (docs/openapi-worker.yaml).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qsl

import orjson

from pan.http.params import query_bool, query_int, query_str
from pan.http.responses import BadRequest

MAX_PAGE = 100_000  # tuples per /data answer
DEFAULT_PAGE = 10_000  # when neither l nor n is given
MAX_WAIT_MS = 60_000
MAX_PAGES = 1024  # streams per ``POST /pages``
HOLDER_NAME = re.compile(r"[A-Za-z0-9._:-]{1,64}")
MAX_INDEX = 2**63 - 1


#: ``known_wm`` of a reader that knows of no watermark (``/data?wm=none``): below every int64 ts.
NO_WM = -(2**63)
NO_WM_TEXT = "none"


@dataclass(frozen=True)
class DataQuery:
    """A `/data` request's parameters, validated."""

    name: str
    after: int
    oldest: int | None
    latest: int | None
    wait_ms: int
    wake_on_meta: bool
    hold: str | None
    #: The raw view of a speculative output, for a reader that has seen this retract generation; None: settled.
    raw_generation: int | None
    #: Arrow only for a page of at least this many tuples (a reader that takes both); None: whenever asked.
    arrow_from: int | None = None
    #: The watermark the reader knows (its last page's ``meta.wm``; ``NO_WM``: none): a long poll that waits on
    #: meta (``m``) answers at once if the stream announced another before the poll began
    #: (``OutputStream.missed_poke``). None: not said (``/data?wm=`` missing).
    known_wm: int | None = None


def data_query(q: Mapping[str, str]) -> DataQuery:
    """The `/data` parameters of ``q``, or ``BadRequest`` naming the first one that is wrong."""
    name = query_str(q, "s", required=True)
    after = query_int(q, "i", default=-1, minimum=-1, maximum=MAX_INDEX)
    latest = query_int(q, "l", minimum=1, maximum=MAX_PAGE)
    oldest = query_int(q, "n", minimum=1, maximum=MAX_PAGE)
    wait_ms = query_int(q, "w", default=0, minimum=0, maximum=MAX_WAIT_MS)
    wake_on_meta = query_bool(q, "m")
    hold = query_str(q, "hold")
    view = query_str(q, "view") or "settled"
    if view not in ("settled", "raw"):
        raise BadRequest("parameter 'view' must be 'settled' or 'raw'")
    generation = query_int(q, "g", default=0, minimum=0, maximum=MAX_INDEX)
    arrow_from = query_int(q, "a", minimum=1, maximum=MAX_PAGE)
    known_wm = NO_WM if q.get("wm") == NO_WM_TEXT else query_int(q, "wm", minimum=NO_WM + 1, maximum=2**63 - 1)
    if latest is not None and oldest is not None:
        raise BadRequest("parameters 'l' (latest) and 'n' (oldest) cannot be used together")
    if hold is not None and not HOLDER_NAME.fullmatch(hold):
        raise BadRequest("parameter 'hold' must be 1-64 letters, digits or . _ : -")
    assert name is not None and after is not None and wait_ms is not None
    return DataQuery(name, after, oldest, latest, wait_ms, wake_on_meta, hold, generation if view == "raw" else None,
                     arrow_from, known_wm)


def pages_body(body: bytes) -> tuple[list[str], int, bool]:
    """The queries, ``w`` and ``m`` of a ``POST /pages`` body, or ``BadRequest``."""
    try:
        request = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise BadRequest("the body must be a JSON object") from None
    if not isinstance(request, dict) or not isinstance(request.get("pages"), list):
        raise BadRequest("the body must be a JSON object with a list 'pages'")
    pages = request["pages"]
    if len(pages) > MAX_PAGES:
        raise BadRequest(f"at most {MAX_PAGES} pages per request, got {len(pages)}")
    if not all(isinstance(page, str) for page in pages):
        raise BadRequest("each of 'pages' must be a /data query string")
    wait_ms, wake_on_meta = request.get("w", 0), request.get("m", False)
    if type(wait_ms) is not int or not 0 <= wait_ms <= MAX_WAIT_MS:
        raise BadRequest(f"'w' must be an integer from 0 to {MAX_WAIT_MS}")
    if type(wake_on_meta) is not bool:
        raise BadRequest("'m' must be true or false")
    return pages, wait_ms, wake_on_meta


def page_query(page: str) -> DataQuery:
    """One ``POST /pages`` query, or ``BadRequest``; ``w`` and ``m`` are the request's, not the page's."""
    q = dict(parse_qsl(page, keep_blank_values=True))
    if "w" in q or "m" in q:
        raise BadRequest("'w' and 'm' belong to the request, not to one page")
    return data_query(q)


def error_page(exc: BadRequest) -> bytes:
    """A page `/data` would refuse, as the error it would answer, with its status as ``code``."""
    return orjson.dumps({"status": "error", "error": exc.message, "code": exc.status})
