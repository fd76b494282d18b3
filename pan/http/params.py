"""Query parameters under strict grammars: a malformed one is a ``BadRequest`` (400) naming it, never a crash."""

from __future__ import annotations

import re
from collections.abc import Mapping

from pan.http.responses import BadRequest

#: An integer parameter: ASCII digits with an optional leading minus, no spaces, '+', '_' or other scripts'
#: digits (which Python's ``int()`` would all accept).
_INTEGER = re.compile(r"-?[0-9]+", re.ASCII)
#: Significant digits of the largest integer parameter (int64); longer ones are out of range, unparsed.
MAX_INT_DIGITS = 19


def query_str(query: Mapping[str, str], name: str, *, required: bool = False) -> str | None:
    value = query.get(name)
    if value is None or value == "":
        if required:
            raise BadRequest(f"missing parameter '{name}'")
        return None
    return value


def _shown(raw: str) -> str:
    return repr(raw if len(raw) <= 40 else raw[:37] + "...")


def parse_int(raw: str, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """``raw`` as an integer under the strict grammar of ``_INTEGER``, within the bounds given."""
    if not _INTEGER.fullmatch(raw):
        raise BadRequest(
            f"parameter '{name}' must be an integer (ASCII digits, optional leading '-'), got {_shown(raw)}"
        )
    negative = raw.startswith("-")
    if len(raw.lstrip("-").lstrip("0")) > MAX_INT_DIGITS:
        if negative and minimum is not None:
            raise BadRequest(f"parameter '{name}' must be >= {minimum}, got {_shown(raw)}")
        if not negative and maximum is not None:
            raise BadRequest(f"parameter '{name}' must be <= {maximum}, got {_shown(raw)}")
        raise BadRequest(f"parameter '{name}' has more than {MAX_INT_DIGITS} digits, got {_shown(raw)}")
    value = int(raw)
    if minimum is not None and value < minimum:
        raise BadRequest(f"parameter '{name}' must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise BadRequest(f"parameter '{name}' must be <= {maximum}, got {value}")
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
    return parse_int(raw, name, minimum=minimum, maximum=maximum)


#: Boolean parameter spellings.  ``1``/``0`` stay because clients send them (e.g. ``m=1`` on `/data`);
#: ``yes``/``no`` and other case variants are refused.
_TRUE = frozenset({"true", "1"})
_FALSE = frozenset({"false", "0"})


def query_bool(query: Mapping[str, str], name: str, *, default: bool = False) -> bool:
    raw = query.get(name)
    if raw is None:
        return default
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise BadRequest(f"parameter '{name}' must be true or false, got {raw!r}")
