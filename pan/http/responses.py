"""The error contract and JSON answers: every PAN server answers errors as ``{"status":"error","error":MSG}``.

Handlers raise ``BadRequest`` (or ``NotFound``) and the middleware of
``pan.http.web`` turns it into an ``error_response``; ``raw_error_response``
is the same answer as bytes, for a connection refused before aiohttp parsed
a request (``pan.http.guard``).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

import orjson
from aiohttp import web

JSON_TYPE = "application/json"

#: Longest error message put into an answer or a log line (aiohttp's own messages quote the bad bytes).
MAX_ERROR_CHARS = 200


class BadRequest(Exception):
    """A client error that maps to an HTTP status and a message."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class NotFound(BadRequest):
    def __init__(self, message: str) -> None:
        super().__init__(message, status=404)


def json_response(payload: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(payload), status=status, content_type=JSON_TYPE)


def raw_json_response(body: bytes, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    """For answers assembled from pre-encoded parts (the hot `/data` path)."""
    return web.Response(body=body, status=status, content_type=JSON_TYPE, headers=headers)


def error_response(message: str, status: int) -> web.Response:
    return json_response({"status": "error", "error": message}, status=status)


def raw_error_response(message: str, status: int) -> bytes:
    """A complete HTTP/1.1 error answer, for a connection refused before any request was parsed."""
    body = orjson.dumps({"status": "error", "error": message})
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: {JSON_TYPE}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def one_line(text: str) -> str:
    """The first line of an error message, at most ``MAX_ERROR_CHARS`` long, for an answer or a log line."""
    first = text.strip().splitlines()[0].rstrip(":") if text.strip() else ""
    return first if len(first) <= MAX_ERROR_CHARS else first[: MAX_ERROR_CHARS - 3] + "..."
