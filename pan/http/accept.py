"""HTTP content negotiation: pick one of the media types a server offers from a request's ``Accept``.

Lenient on purpose: a ``/data`` reader must always get a page, so an
unparsable, empty or unsatisfiable ``Accept`` yields the server's default
type (the first offered) rather than 406. Malformed entries are skipped,
well-formed ones still count (RFC 9110, section 12.5.1).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_MEDIA_RANGE = re.compile(rf"({_TOKEN})/({_TOKEN})")
_QVALUE = re.compile(r"0(\.[0-9]{0,3})?|1(\.0{0,3})?")
MAX_ENTRIES = 64  # an Accept with more entries is read up to here: no request makes this loop long


def parse_accept(header: str | None) -> list[tuple[str, str, float]]:
    """``(type, subtype, q)`` of every well-formed entry of ``header``, lower-cased; malformed ones left out."""
    if not header:
        return []
    ranges = []
    for entry in header.split(",")[:MAX_ENTRIES]:
        media, *params = entry.split(";")
        match = _MEDIA_RANGE.fullmatch(media.strip())
        if match is None:
            continue
        q = 1.0
        for param in params:
            key, _, value = param.strip().partition("=")
            if key.strip().lower() != "q":
                continue  # media-type parameters (charset, version) do not change the choice here
            value = value.strip()
            q = float(value) if _QVALUE.fullmatch(value) else -1.0
        if q >= 0:
            ranges.append((match.group(1).lower(), match.group(2).lower(), q))
    return ranges


def quality(ranges: list[tuple[str, str, float]], media_type: str) -> float:
    """The q of ``media_type``: that of the most specific matching range (exact, then ``type/*``, then ``*/*``)."""
    kind, _, sub = media_type.lower().partition("/")
    best_specificity, q = -1, 0.0
    for r_kind, r_sub, r_q in ranges:
        if r_kind == kind and r_sub == sub:
            specificity = 2
        elif r_kind == kind and r_sub == "*":
            specificity = 1
        elif r_kind == "*" and r_sub == "*":
            specificity = 0
        else:
            continue
        if specificity > best_specificity or (specificity == best_specificity and r_q > q):
            best_specificity, q = specificity, r_q
    return q


def choose(header: str | None, offered: Sequence[str]) -> str:
    """The offered type the client prefers; ties, and a header that accepts none of them, go to ``offered[0]``."""
    ranges = parse_accept(header)
    if not ranges:
        return offered[0]
    best, best_q = offered[0], quality(ranges, offered[0])
    for media_type in offered[1:]:
        q = quality(ranges, media_type)
        if q > best_q:
            best, best_q = media_type, q
    return best if best_q > 0 else offered[0]
