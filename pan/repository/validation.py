"""What the repository accepts from a request: checks and parsing of its parameters.

The repository is reachable by anyone who can reach a worker, so what it
accepts is checked and bounded: a publisher is an IP address or DNS name
and a port (nothing a URL built from them could smuggle a path into), a
stream name is short printable text, and an ``exclude`` list is bounded.
The server (pan/repository/server.py) raises what these raise as its 400s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pan.http.addresses import is_host
from pan.http.responses import BadRequest
from pan.repository.registry import Endpoint

DEFAULT_LEASE_MS = 15_000
MIN_LEASE_MS = 100
MAX_LEVEL = 1000
#: Longest stream name; names are printable text (no control characters).
MAX_STREAM_NAME_CHARS = 256
#: Endpoints in one `exclude` parameter.
MAX_EXCLUDED = 1000


def check_host(value: Any, name: str = "h") -> str:
    if not isinstance(value, str) or not is_host(value):
        raise BadRequest(
            f"parameter '{name}' must be an IP address or a DNS name (no port, path or spaces), got {value!r:.80}"
        )
    return value


def check_stream(value: Any, name: str = "s") -> str:
    if (
        not isinstance(value, str)
        or not value
        or len(value) > MAX_STREAM_NAME_CHARS
        or not value.isprintable()
    ):
        raise BadRequest(
            f"parameter '{name}' must be a stream name of 1 to {MAX_STREAM_NAME_CHARS} printable characters, "
            f"got {value!r:.80}"
        )
    return value


def parse_endpoints(raw: str | None) -> set[Endpoint]:
    """``host:port,[v6]:port`` -> set; used by the optional `exclude` parameter."""
    if not raw:
        return set()
    parts = raw.split(",")
    if len(parts) > MAX_EXCLUDED:
        raise BadRequest(f"parameter 'exclude' lists more than {MAX_EXCLUDED} endpoints")
    endpoints: set[Endpoint] = set()
    for part in parts:
        if part.startswith("["):
            host, sep, port = part[1:].partition("]:")
        else:
            host, sep, port = part.rpartition(":")
        if not sep or not is_host(host) or not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise BadRequest(f"parameter 'exclude' must be host:port[,host:port...], got {part!r:.80}")
        endpoints.add((host, int(port)))
    return endpoints


@dataclass(frozen=True, slots=True)
class Registration:
    host: str
    port: int
    rep: bool
    lvl: int
    lease_ms: int


#: `POST /publish` body fields besides ``s``, and the JSON types each must have.
_POST_FIELDS = {"h": "a string", "p": "an integer", "rep": "true or false", "lvl": "an integer", "ttl": "an integer"}


def post_params(body: dict[str, Any]) -> dict[str, str]:
    """The body's fields as GET-style text, once each has the right JSON type (``"yes"`` is no boolean)."""
    params: dict[str, str] = {}
    for key, value in body.items():
        if key == "s" or value is None:
            continue
        if key not in _POST_FIELDS:
            raise BadRequest(f"unknown field {key!r:.40} (expected s, {', '.join(_POST_FIELDS)})")
        if key == "h":
            ok = isinstance(value, str)
        elif key == "rep":
            ok = isinstance(value, bool)
        else:
            ok = isinstance(value, int) and not isinstance(value, bool)
        if not ok:
            raise BadRequest(f"field '{key}' must be {_POST_FIELDS[key]}, got {value!r:.80}")
        params[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return params
