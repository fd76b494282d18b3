"""The app every PAN server runs: ``make_app`` with the middleware that enforces the error contract.

Every PAN server answers errors as ``{"status":"error","error":MSG}``
(``pan.http.responses``) and never lets a bad request crash it.  The
middleware here enforces both for requests that reach a handler: it refuses
query strings that are not UTF-8, reads the body within the body timeout and
size limit, turns ``BadRequest`` and aiohttp's HTTP errors into JSON answers
and a handler bug into a 500.  What aiohttp refuses itself, before any
handler, is answered by ``pan.http.guard``; serving is ``pan.http.server``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from pan.http.limits import GATE_KEY, LIMITS_KEY, STATS_KEY, HttpLimits, HttpStats, note_refusal
from pan.http.responses import BadRequest, error_response
from pan.security.auth import AuthError, Gate

log = logging.getLogger(__name__)

#: Largest request body (bytes) a server built by ``make_app`` reads, unless told otherwise; larger is 413.
DEFAULT_MAX_BODY_BYTES = 1 << 20

_MAX_BODY = web.AppKey("pan_http_max_body", int)


async def _read_body(request: web.Request) -> None:
    """Read the body into the request within the body timeout, so handlers' ``read()`` returns at once."""
    limit = request.app.get(_MAX_BODY, DEFAULT_MAX_BODY_BYTES)
    if request.content_length is not None and request.content_length > limit:
        raise BadRequest(f"request body of {request.content_length} bytes is larger than {limit} bytes", 413)
    timeout_s = request.app.get(LIMITS_KEY, HttpLimits()).body_timeout_s
    try:
        async with asyncio.timeout(timeout_s):
            await request.read()
    except TimeoutError:
        stats = request.app.get(STATS_KEY)
        if stats is not None:
            stats.body_timeouts += 1
        raise BadRequest(f"request body not received within {timeout_s:g} s", 408) from None
    except web.HTTPRequestEntityTooLarge:
        raise BadRequest(f"request body is larger than {limit} bytes", 413) from None
    except (ConnectionError, RequestPayloadError) as exc:
        raise BadRequest(f"request body incomplete: {exc}") from None


def _has_undecodable(query: Mapping[str, str]) -> bool:
    """Whether a percent-escaped query held bytes that are not UTF-8 (yarl decodes them to U+FFFD)."""
    return any("\ufffd" in key or "\ufffd" in value for key, value in query.items())


def refuse(request: web.Request, status: int, message: str) -> web.Response:
    """A refused request counted, logged and answered in the JSON contract."""
    note_refusal(request.app.get(STATS_KEY), status, request.remote, f"{request.method} {request.path}", message)
    response = error_response(message, status)
    if status in (408, 413):  # the rest of the body is not worth reading
        response.force_close()
    return response


@web.middleware
async def error_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        if "%" in request.rel_url.raw_query_string and _has_undecodable(request.query):
            raise BadRequest("query string is not valid UTF-8")
        if request.body_exists:
            await _read_body(request)
        return await handler(request)
    except BadRequest as exc:
        return refuse(request, exc.status, exc.message)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return refuse(request, exc.status, exc.reason)
    except Exception:  # a handler bug must not take the server down
        log.exception("unhandled error in %s %s", request.method, request.path)
        return error_response("internal error", 500)


def auth_middleware(gate: Gate) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Requests ``gate`` refuses end here with 401 or 403, in the JSON error contract."""

    @web.middleware
    async def check(request: web.Request,
                    handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        body = await request.read() if request.body_exists else b""
        try:
            gate.check(request.method, request.path, request.query.items(), body, request.headers)
        except AuthError as exc:
            raise BadRequest(exc.message, exc.status) from None
        return await handler(request)

    return check


def make_app(*, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, gate: Gate | None = None) -> web.Application:
    """An app with the JSON error contract; bodies over ``max_body_bytes`` are refused with 413. With a ``gate``,
    only requests it lets through reach a handler (pan.security.auth)."""
    middlewares = [error_middleware] if gate is None else [error_middleware, auth_middleware(gate)]
    app = web.Application(middlewares=middlewares, client_max_size=max_body_bytes)
    app[_MAX_BODY] = max_body_bytes
    app[STATS_KEY] = HttpStats()
    if gate is not None:
        app[GATE_KEY] = gate
    return app
