"""Publishers that share a process with their subscribers (the workers of one peer).

A peer hosts many workers in one process.  Pulling a neighbour's stream over
loopback HTTP costs more CPU than most components spend on the tuples, and
under load that CPU turns into query delay.  Workers of one peer therefore
register their ``/data`` function in a shared ``LocalPublishers`` directory,
and a subscriber whose chosen publisher is in it calls the function directly.

Everything else stays as over HTTP: the repository still picks the publisher,
the answer is the same ``/data`` body, so positions, ``missed``, ``meta`` and
epochs behave identically (a reader that computes on columns gets the same
page with a column buffer's rows themselves as its tuples), long polls wait on the same ring buffer, and a
publisher that stops leaves the directory first, so its subscribers fall
back to HTTP, fail and look for another publisher as usual.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

from pan.wire.data_query import DataQuery

#: How a page is written: a JSON page, a line page (pan/wire/line_pages.py) or an Arrow page (pan/wire/arrow_pages.py);
#: in process only, ``rows``: a column buffer's page as a decoded page whose tuples are its rows
#: (``ColumnOutputStream.row_page``), with nothing encoded at all.
PageForm = Literal["json", "lines", "arrow", "rows"]
#: ``serve(query, form)`` -> the `/data` answer body (``form="arrow"``: JSON where the page is not columnar, or
#: holds fewer tuples than ``query.arrow_from``), or for ``form="rows"`` the decoded page of a column buffer
#: (else the JSON body).
DataFunction = Callable[[DataQuery, PageForm], Awaitable[bytes | dict[str, Any]]]


class LocalPublishers:
    """``host:port`` of a worker in this process -> its `/data` function."""

    def __init__(self) -> None:
        self._serve: dict[tuple[str, int], DataFunction] = {}

    def register(self, host: str, port: int, serve: DataFunction) -> None:
        self._serve[(host, port)] = serve

    def unregister(self, host: str, port: int) -> None:
        self._serve.pop((host, port), None)

    def lookup(self, host: str, port: int) -> DataFunction | None:
        return self._serve.get((host, port))

    def __len__(self) -> int:
        return len(self._serve)
