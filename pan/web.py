"""Shared aiohttp plumbing: orjson answers, the error contract, query parsing.

Every PAN server answers errors as ``{"status":"error","error":MSG}`` and
never lets a bad request crash it; the middleware here enforces both.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson
from aiohttp import web

log = logging.getLogger(__name__)

JSON_TYPE = "application/json"


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


def raw_json_response(body: bytes, status: int = 200) -> web.Response:
    """For answers assembled from pre-encoded parts (the hot `/data` path)."""
    return web.Response(body=body, status=status, content_type=JSON_TYPE)


def error_response(message: str, status: int) -> web.Response:
    return json_response({"status": "error", "error": message}, status=status)


@web.middleware
async def error_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        return await handler(request)
    except BadRequest as exc:
        return error_response(exc.message, exc.status)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(exc.reason, exc.status)
    except Exception:  # a handler bug must not take the server down
        log.exception("unhandled error in %s %s", request.method, request.path_qs)
        return error_response("internal error", 500)


def make_app() -> web.Application:
    return web.Application(middlewares=[error_middleware])


# --- query parameters ---------------------------------------------------------


def query_str(query: Mapping[str, str], name: str, *, required: bool = False) -> str | None:
    value = query.get(name)
    if value is None or value == "":
        if required:
            raise BadRequest(f"missing parameter '{name}'")
        return None
    return value


def query_int(
    query: Mapping[str, str],
    name: str,
    *,
    default: int | None = None,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int | None:
    raw = query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequest(f"parameter '{name}' must be an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise BadRequest(f"parameter '{name}' must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise BadRequest(f"parameter '{name}' must be <= {maximum}, got {value}")
    return value


def query_bool(query: Mapping[str, str], name: str, *, default: bool = False) -> bool:
    raw = query.get(name)
    if raw is None:
        return default
    lowered = raw.lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise BadRequest(f"parameter '{name}' must be true or false, got {raw!r}")


# --- serving --------------------------------------------------------------------


class HttpServer:
    """An aiohttp app bound to host:port with an explicit start/stop lifecycle."""

    def __init__(self, app: web.Application, host: str, port: int) -> None:
        self.app = app
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        if self.port == 0:  # report the port the OS picked
            self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (for tests and launch scripts)."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` ports that were free a moment ago, all different: they are held together while chosen."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for sock in sockets:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
