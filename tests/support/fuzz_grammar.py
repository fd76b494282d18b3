"""Hypothesis strategies for PAN's query grammar, each value tagged with the verdict the contract gives it.

The wire contract (README "Wire contracts", issue 10 fix 3 and fix 8) says
what a server must accept: integers are ASCII digits with an optional
leading minus, within the documented range; hosts are IP addresses or DNS
names; flags are booleans.  Each strategy yields a ``Param``: the raw text
sent and whether the contract makes it VALID, INVALID, or leaves it open
(EITHER: e.g. leading zeros, ``yes`` for a flag, an IPv6 literal), so that a
fuzz test can predict the status of a whole request.
"""

from __future__ import annotations

import ipaddress
import os
import random
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

VALID = "valid"
INVALID = "invalid"
EITHER = "either"  # the contract does not decide: a server may accept or refuse it (never 5xx)

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

SLOW = os.environ.get("CI") == "true" or os.environ.get("PAN_SLOW") == "1"
#: Generated requests per endpoint family: the acceptance bar in the slow suite, a smoke run otherwise.
REQUESTS_PER_FAMILY = 10_000 if SLOW else 300
#: Requests per Hypothesis example: batching keeps Hypothesis' own overhead small next to the requests.
BATCH = 10


def fuzz_settings(requests: int = REQUESTS_PER_FAMILY, batch: int = BATCH) -> settings:
    """Reproducible (derandomized, no example database), no deadline: the machine is shared and loaded."""
    return settings(
        max_examples=-(-requests // batch),
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
        # The slow run is about volume within minutes: a failure is reported as found (each assertion names
        # the request), not shrunk; the quick run shrinks it.
        phases=[Phase.explicit, Phase.reuse, Phase.generate] if SLOW else list(Phase),
    )


@dataclass(frozen=True)
class Param:
    """One query value: what is sent, the contract's verdict, and the value it denotes when valid."""

    raw: str | bytes  # bytes: sent percent-encoded as they are (may be invalid UTF-8)
    verdict: str
    value: Any = None

    def encoded(self) -> str:
        data = self.raw if isinstance(self.raw, bytes) else self.raw.encode("utf-8")
        return urllib.parse.quote_from_bytes(data, safe="")


def query(params: dict[str, Param | None], extra: list[tuple[str, str]] = ()) -> str:
    """``?name=value&...`` for the present parameters, in order, then any extra (unknown) ones."""
    parts = [f"{name}={param.encoded()}" for name, param in params.items() if param is not None]
    parts += [f"{urllib.parse.quote(k, safe='')}={urllib.parse.quote(v, safe='')}" for k, v in extra]
    return "?" + "&".join(parts) if parts else ""


def verdicts(*params: Param | None) -> set[str]:
    return {p.verdict for p in params if p is not None}


def expected_statuses(params: list[Param | None], ok: set[int]) -> set[int]:
    """400 if any value is invalid; else the statuses ``ok`` predicts, plus 400 if any value is open."""
    found = verdicts(*params)
    if INVALID in found:
        return {400}
    return ok | ({400} if EITHER in found else set())


# --- value pools ------------------------------------------------------------------------------------
#
# Each parameter's values come from a pool built once, from boundaries, spellings the contract
# names and seeded random text, so that Hypothesis spends one draw per parameter: 10,000 requests
# per family must fit in about a minute on a loaded two-core machine, where a fully generated
# value costs several draws (about 9 ms of Hypothesis time per request).

_RNG = random.Random(20261123)
#: Code points random text is drawn from: ASCII (controls included), Latin-1, other scripts' digits,
#: combining marks, right-to-left letters, CJK, emoji, the replacement character, and non-characters.
_ALPHABET = "".join(
    chr(c)
    for lo, hi in [
        (0x00, 0x7F), (0x80, 0xFF), (0x660, 0x669), (0x966, 0x96F), (0xFF10, 0xFF19), (0x300, 0x30F),
        (0x5D0, 0x5EA), (0x4E00, 0x4E10), (0x1F600, 0x1F60F), (0xFFFD, 0xFFFF), (0x2028, 0x202E),
    ]
    for c in range(lo, hi + 1)
)


def random_text(max_len: int, rng: random.Random = _RNG) -> str:
    return "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(1, max_len)))


def pick(pool: list[Param], absent: float = 0.0) -> st.SearchStrategy[Param | None]:
    """One draw: a pooled value, or (with probability ``absent``) no parameter at all."""
    nones = round(len(pool) * absent / (1 - absent)) if absent else 0
    return st.sampled_from([*pool, *([None] * nones)])


def _spread(lo: int, hi: int, count: int) -> list[int]:
    """Boundaries, small values and a log-uniform spread over [lo, hi]."""
    picks = {lo, hi, min(max(lo, 0), hi), min(max(lo, 1), hi), min(lo + 1, hi), max(hi - 1, lo)}
    span = hi - lo
    for _ in range(count):
        picks.add(lo + min(span, int(2 ** _RNG.uniform(0, max(1.0, span.bit_length())))) - 1 if span else lo)
    return sorted(n for n in picks if lo <= n <= hi)


def _not_a_number(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return True
    return False


# --- integers ----------------------------------------------------------------------------------

ARABIC_INDIC = str.maketrans("0123456789", "".join(chr(0x660 + d) for d in range(10)))
FULLWIDTH = str.maketrans("0123456789", "".join(chr(0xFF10 + d) for d in range(10)))
NOT_NUMBERS = ["", "-", "--1", "1.0", "1e3", "0x10", "NaN", "inf", "true", "1,2", "\u0967", "\u22121", "1 2", "\u0663"]


def _lenient_forms(n: int) -> list[str]:
    """Texts Python's int() reads as ``n`` that are not ASCII digits with an optional minus."""
    text = str(abs(n))
    sign = "-" if n < 0 else ""
    forms = [
        f" {sign}{text}",
        f"{sign}{text} ",
        f"+{text}" if n >= 0 else f"- {text}",
        f"{sign}{text}".translate(ARABIC_INDIC),
        f"{sign}{text}".translate(FULLWIDTH),
        f"\t{sign}{text}\n",
    ]
    if len(text) > 1:
        forms.append(f"{sign}{text[0]}_{text[1:]}")
    return forms


def integer_pool(lo: int, hi: int, *, valid: tuple[int, int] | None = None) -> list[Param]:
    """Integers in [lo, hi] (``valid`` narrows the ones sent), out of range, lenient spellings, non-numbers."""
    vlo, vhi = valid or (lo, hi)
    good = [Param(str(n), VALID, n) for n in _spread(vlo, vhi, 40)]
    outside = {lo - 1, lo - 1000, hi + 1, hi + 10**6, 2**63, -(2**63) - 1, 2**64, 10**100, -(10**100)}
    bad = [Param(str(n), INVALID) for n in sorted(outside) if not lo <= n <= hi]
    bad.append(Param("9" * 400, INVALID))
    for n in _RNG.sample(good, min(6, len(good))):
        bad += [Param(form, INVALID) for form in _lenient_forms(n.value)]
    bad += [Param(text, INVALID) for text in NOT_NUMBERS]
    bad += [Param(t, INVALID) for t in (random_text(10) for _ in range(15)) if _not_a_number(t)]
    zeros = [Param(f"00{n.value}", EITHER, n.value) for n in good[:4] if n.value >= 0]
    return good + good + bad + zeros  # about half of the values are valid


def integer_param(
    lo: int, hi: int, *, valid: tuple[int, int] | None = None, absent: float = 0.25
) -> st.SearchStrategy[Param | None]:
    return pick(integer_pool(lo, hi, valid=valid), absent)


def bool_param(absent: float = 0.4) -> st.SearchStrategy[Param | None]:
    """``true``/``false``/``1``/``0`` are flags; ``yes``, ``TRUE``... are left open; anything else is invalid."""
    flags = [("true", True), ("false", False), ("1", True), ("0", False)]
    canonical = [Param(text, VALID, value) for text, value in flags]
    open_forms = [Param(text, EITHER) for text in ["yes", "no", "TRUE", "False", "on", "off", "Yes"]]
    words = ["", "maybe", "2", "-1", "tru", "true ", " 1", "null", "[]", "\u00fc"]
    junk = [t for t in (random_text(6) for _ in range(10)) if t.lower() not in {"true", "false", "1", "0"}]
    invalid = [Param(text, INVALID) for text in words + junk]
    return pick(canonical * 4 + open_forms + invalid, absent)


# --- names and hosts -------------------------------------------------------------------------------

NAME_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-"
PLAIN_NAMES = sorted({"".join(_RNG.choice(NAME_CHARS) for _ in range(_RNG.randint(1, 40))) for _ in range(60)})
ODD_NAMES = [random_text(30) for _ in range(40)]
NON_UTF8 = [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"A\xfe\xffB", b"\x80" * 5, b"\xf8\x88\x80\x80\x80"]


def stream_param(known: list[str], absent: float = 0.1) -> st.SearchStrategy[Param | None]:
    """A known stream (value = name), an unknown plain name, odd text, non-UTF-8 bytes, or the empty name.

    VALID with ``value`` the decoded name for names the server must look up;
    EITHER for names a server may refuse outright (control characters, odd
    Unicode, non-UTF-8); INVALID for the empty name.
    """
    pool = [Param(name, VALID, name) for name in known] * 15
    pool += [Param(name, VALID, name) for name in PLAIN_NAMES]
    pool += [Param(name, EITHER, name) for name in ODD_NAMES]
    pool += [Param(data, INVALID) for data in NON_UTF8]  # README: a query that is not UTF-8 is a 400
    pool += [Param("", INVALID)] * 3
    return pick(pool, absent)


def _host_verdict(host: str) -> str:
    """VALID: a dotted-quad IPv4 address or a lower-case DNS host name; INVALID: surely neither."""
    if not host or len(host) > 253:
        return INVALID
    inner = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        address = ipaddress.ip_address(inner)
    except ValueError:
        pass
    else:
        return VALID if address.version == 4 and inner == host else EITHER  # IPv6, bracketed or not
    if re.search(r"[\s/?#@%\\\[\]:\x00-\x1f\x7f]", host):
        return INVALID  # a path, query, fragment, user, port or URL, not a host
    labels = host.split(".")
    if any(not label for label in labels[:-1]) or any(len(label) > 63 for label in labels):
        return INVALID
    if all(re.fullmatch(r"[a-z]([a-z0-9-]*[a-z0-9])?", label) for label in labels):
        return VALID
    if any(label.startswith("-") or label.endswith("-") for label in labels if label):
        return INVALID
    return EITHER  # digits-only labels, upper case, underscores, a trailing dot, IDN...


def _label() -> str:
    inner = "".join(_RNG.choice("abcdefghijklmnopqrstuvwxyz0123456789-") for _ in range(_RNG.randint(0, 10)))
    return _RNG.choice("abcdefghijklmnopqrstuvwxyz") + (inner + _RNG.choice("abcdefghijklmnopqrstuvwxyz0123456789"))


IPV4 = [str(ipaddress.IPv4Address(_RNG.getrandbits(32))) for _ in range(20)] + ["127.0.0.1", "0.0.0.0", "10.1.2.3"]
DNS_NAMES = [".".join(_label() for _ in range(_RNG.randint(1, 4))) for _ in range(20)] + ["localhost"]
HOSTILE_HOSTS = [
    "127.0.0.1:31098/admin/delete-everything?confirm=yes#",
    "127.0.0.1:8080",
    "evil.example/path",
    "user@host",
    "a b",
    "host#frag",
    "",
    "-leading.example",
    "a..b",
    "x" * 64 + ".example",
    "h" * 300,
    "[::1]",
    "::1",
    "fe80::1%eth0",
    "LOCALHOST",
    "under_score.example",
    "1.2.3",
    "256.1.1.1",
    "localhost.",
    "b\u00fccher.example",
    "127.0.0.1\r\nX: y",
]
ODD_HOSTS = [random_text(20) for _ in range(20)]
HOSTS = [Param(h, _host_verdict(h), h) for h in [*IPV4, *DNS_NAMES, *HOSTILE_HOSTS, *ODD_HOSTS]]


def host_param(absent: float = 0.1) -> st.SearchStrategy[Param | None]:
    """Hosts a publisher may give (IPv4, DNS names) and hostile ones (finding 3: paths, ports, fragments)."""
    return pick(HOSTS, absent)


def endpoint_list_param(known_endpoint: str, absent: float = 0.4) -> st.SearchStrategy[Param | None]:
    """``exclude``: ``host:port[,host:port...]``; value = the set of (host, port) it names."""
    good = [(known_endpoint, VALID)] * 10
    good += [(f"{_RNG.choice(IPV4 + DNS_NAMES)}:{_RNG.randint(1, 65535)}", VALID) for _ in range(20)]
    bad = [(e, INVALID) for e in ["nohost", ":80", "h:", "h:x", "h:-1", "h: 80", "h:8 0", "h:+80"]]
    open_ = [(e, EITHER) for e in ["h:70000", "h:0", "h:\u0665", "[::1]:80", "weird host:80", "h:0080", ""]]
    entries = good + good + bad + open_
    pool = []
    for _ in range(150):
        items = _RNG.sample(entries, _RNG.randint(1, 4))
        text = ",".join(entry for entry, _ in items)
        found = {verdict for _, verdict in items}
        verdict = INVALID if INVALID in found else EITHER if EITHER in found else VALID
        # The endpoints a server that accepts the list would skip: every entry with an ASCII port.
        value = {
            (host, int(port))
            for host, _, port in (entry.rpartition(":") for entry, _ in items)
            if port.isascii() and port.isdigit()
        }
        pool.append(Param(text, verdict, value))
    return pick(pool, absent)


UNKNOWN_PARAMS = st.sampled_from(
    [[]] * 12
    + [[("x", "1")], [("foo", random_text(8))], [("S", "SENSOR4")], [("ii", "-5"), ("_", "")], [("callback", "f")]]
)
