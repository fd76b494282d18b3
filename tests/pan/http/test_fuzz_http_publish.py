"""Fuzzing the repository's registrations: `GET /publish`, `POST /publish` bodies and `/unpublish`.

They go to the scratch repository, and every accepted registration is unpublished again.  What every
answer must satisfy is in ``fuzz_http_servers.py``.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.pan.http.fuzz_http_servers import LEVELS, _checked, _run
from tests.support.fuzz_grammar import (
    BATCH,
    EITHER,
    INVALID,
    NON_UTF8,
    ODD_NAMES,
    PLAIN_NAMES,
    REQUESTS_PER_FAMILY,
    UNKNOWN_PARAMS,
    VALID,
    Param,
    bool_param,
    expected_statuses,
    fuzz_settings,
    host_param,
    integer_param,
    integer_pool,
    pick,
    query,
)
from tests.support.live_servers import RawHttp

pytestmark = pytest.mark.timeout(900)

#: Lease (ms) the contract surely accepts; longer ones up to the current hour-long maximum are left open.
SURE_LEASE = (100, 30_000)
MAX_LEASE_MS = 3_600_000


def _lease_param() -> st.SearchStrategy[Param | None]:
    """The contract fixes no exact minimum or maximum lease: only the sure range is valid, short ones are open."""
    lo, hi = SURE_LEASE
    pool = [
        Param(p.raw, EITHER, p.value) if p.verdict == VALID and not lo <= p.value <= hi else p
        for p in integer_pool(1, MAX_LEASE_MS, valid=SURE_LEASE)
    ]
    return pick(pool + [Param(str(n), EITHER, n) for n in (1, 50, lo - 1)], absent=0.5)


def _level_verdict(rep: Param | None, lvl: Param | None) -> str:
    """An original producer (rep false) has level 0; a repeater (rep true) a level >= 1 (default 1)."""
    rep_value = rep.value if rep is not None and rep.verdict == VALID else None if rep is not None else False
    lvl_value = lvl.value if lvl is not None and lvl.verdict != INVALID else None
    if rep_value is None or (lvl is not None and lvl_value is None):
        return EITHER
    level = lvl_value if lvl is not None else (1 if rep_value else 0)
    return VALID if (level == 0) != rep_value else INVALID


def _stream_name() -> st.SearchStrategy[Param | None]:
    """Stream names as the repository takes them: 1 to 256 printable characters (README), UTF-8."""
    names = PLAIN_NAMES + ODD_NAMES + ["x" * 256, "y" * 257]
    pool = [Param(s, VALID if s.isprintable() and 1 <= len(s) <= 256 else INVALID, s) for s in names]
    return pick(pool + [Param(b, INVALID) for b in NON_UTF8] + [Param("", INVALID)] * 3, absent=0.1)


def _unpublish_round_trip(client: RawHttp, names: list[str | bytes], host: Param, port: str, request: str) -> None:
    """What publish registered, unpublish with the same parameters removes, once."""
    for name in dict.fromkeys(names):
        params = {"s": Param(name, VALID), "h": host, "p": Param(port, VALID)}
        target = "/unpublish" + query(params)
        _checked(client.get(target), {200}, f"{target} after {request}")
        _checked(client.get(target), {404}, f"{target} a second time after {request}")


def test_publish_get_grammar(scratch_http: RawHttp) -> None:
    """`GET /publish`: s, h, p, rep, lvl, ttl; every accepted registration is then unpublished."""
    requests = st.fixed_dictionaries(
        {
            "s": _stream_name(),
            "h": host_param(),
            "p": integer_param(1, 65535, absent=0.1),
            "rep": bool_param(absent=0.5),
            "lvl": integer_param(0, LEVELS, absent=0.6),
            "ttl": _lease_param(),
        }
    )

    @fuzz_settings()
    @given(st.lists(st.tuples(requests, UNKNOWN_PARAMS), min_size=BATCH, max_size=BATCH))
    def fuzz(batch: list[tuple[dict[str, Param | None], list[tuple[str, str]]]]) -> None:
        for params, extra in batch:
            target = "/publish" + query(params, extra)
            required_missing = any(params[name] is None for name in ("s", "h", "p"))
            levels = Param("", _level_verdict(params["rep"], params["lvl"]))
            expected = {400} if required_missing else expected_statuses([*params.values(), levels], {200})
            payload = _checked(scratch_http.get(target), expected, target)
            if payload is None:
                continue
            assert payload["status"] == "ok" and isinstance(payload["lease_ms"], int), f"{target}: {payload}"
            ttl = params["ttl"]
            if ttl is not None and ttl.verdict == VALID:
                assert payload["lease_ms"] == ttl.value, f"{target}: {payload}"
            s, h, p = params["s"], params["h"], params["p"]
            assert s is not None and h is not None and p is not None
            _unpublish_round_trip(scratch_http, [s.raw], h, str(p.raw), target)

    _run(fuzz, scratch_http, REQUESTS_PER_FAMILY)


# POST /publish: JSON values, tagged like query values.
HOSTS = host_param(absent=0)
PLAIN_NAME = st.sampled_from(PLAIN_NAMES)
_JSON_HOSTILE = [{"a": 1}, ["127.0.0.1"], 127001, None, True, 1.5]


@functools.cache
def huge_body(names: int) -> bytes:
    """A registration of ``names`` streams: megabytes (built once per size)."""
    return b'{"h":"127.0.0.1","p":80,"s":' + orjson.dumps([f"S{k}" for k in range(names)]) + b"}"


@st.composite
def publish_bodies(draw: st.DrawFn) -> tuple[bytes, str, dict[str, Any] | None]:
    """A POST /publish body, its verdict, and the registration (s list, h, p) when it is surely valid."""
    roll = draw(st.integers(0, 499))  # 1 in 500 bodies is huge: each is megabytes
    shape = ["huge", *["not_object"] * 10, *["not_json"] * 10, *["non_utf8"] * 5][roll] if roll < 26 else "object"
    if shape == "not_object":
        value = draw(st.one_of(st.lists(st.integers(), max_size=3), st.integers(), st.text(max_size=5), st.none()))
        return json.dumps(value).encode(), INVALID, None
    if shape == "not_json":
        return draw(st.sampled_from([b"", b"{", b"{'s': 1}", b"s=1&h=x", b"[1,]", b"{}}", b"nul"])), INVALID, None
    if shape == "non_utf8":
        return b'{"s": ["\xff\xfe"], "h": "127.0.0.1", "p": 80}', INVALID, None
    if shape == "huge":  # beyond any sane registration body: refused (413), never read into memory as streams
        return huge_body(draw(st.sampled_from([150_000, 300_000]))), "huge", None
    body: dict[str, Any] = {}
    verdict = VALID
    registration: dict[str, Any] = {}

    def worst(new: str) -> None:
        nonlocal verdict
        if new == INVALID or verdict == INVALID:
            verdict = INVALID
        elif new == EITHER:
            verdict = EITHER

    s_kind = draw(st.sampled_from(["list"] * 6 + ["empty", "string", "non_strings", "missing", "empty_name"]))
    if s_kind == "list":
        names = draw(st.lists(PLAIN_NAME, min_size=1, max_size=8))
        body["s"] = names
        registration["s"] = names
    elif s_kind == "string":
        body["s"] = draw(PLAIN_NAME)
        worst(INVALID)
    elif s_kind == "non_strings":
        body["s"] = [draw(PLAIN_NAME), draw(st.one_of(st.integers(), st.none(), st.lists(st.integers(), max_size=1)))]
        worst(INVALID)
    elif s_kind == "empty":
        body["s"] = []
        worst(INVALID)
    elif s_kind == "empty_name":
        body["s"] = [""]
        worst(INVALID)
    else:
        worst(INVALID)

    h_kind = draw(st.sampled_from(["text"] * 5 + ["hostile", "missing"]))
    if h_kind == "text":
        host = draw(HOSTS)
        body["h"] = host.raw
        registration["h"] = host
        worst(host.verdict)
    elif h_kind == "hostile":  # finding 3: a host given as an object, list, number...
        body["h"] = draw(st.sampled_from(_JSON_HOSTILE))
        worst(INVALID)
    else:
        worst(INVALID)

    p_kind = draw(st.sampled_from(["int"] * 5 + ["out", "string", "bool", "float", "missing"]))
    if p_kind == "int":
        body["p"] = registration["p"] = draw(st.integers(1, 65535))
    elif p_kind == "out":
        body["p"] = draw(st.one_of(st.integers(max_value=0), st.integers(min_value=65536)))
        worst(INVALID)
    elif p_kind == "string":
        body["p"] = str(draw(st.integers(1, 65535)))
        worst(EITHER)
    elif p_kind == "bool":
        body["p"] = True
        worst(INVALID)
    elif p_kind == "float":
        body["p"] = draw(st.sampled_from([80.5, 1e300, float("1e3")]))
        worst(INVALID if body["p"] != 1000.0 else EITHER)
    else:
        worst(INVALID)

    rep_kind = draw(st.sampled_from(["absent", "absent", "bool", "bool", "text", "number", "null"]))
    rep: bool | None = False
    if rep_kind == "bool":
        rep = body["rep"] = draw(st.booleans())
    elif rep_kind == "text":  # finding 3: rep:"yes" registered a repeater
        body["rep"] = draw(st.sampled_from(["yes", "true", "1", "no", "false"]))
        worst(INVALID if body["rep"] in ("yes", "no") else EITHER)
        rep = None
    elif rep_kind == "number":
        body["rep"] = draw(st.sampled_from([0, 1, 2]))
        worst(INVALID if body["rep"] == 2 else EITHER)
        rep = None
    elif rep_kind == "null":
        body["rep"] = None
        worst(EITHER)

    lvl_kind = draw(st.sampled_from(["absent", "absent", "int", "out", "bool", "string"]))
    lvl: int | None = None
    if lvl_kind == "int":
        lvl = body["lvl"] = draw(st.integers(0, 3))
    elif lvl_kind == "out":
        body["lvl"] = draw(st.one_of(st.integers(max_value=-1), st.integers(min_value=LEVELS + 1)))
        worst(INVALID)
    elif lvl_kind == "bool":
        body["lvl"] = False
        worst(INVALID)
    elif lvl_kind == "string":
        body["lvl"] = "1"
        worst(EITHER)
    if rep is not None and lvl_kind in ("absent", "int"):
        level = lvl if lvl is not None else (1 if rep else 0)
        worst(VALID if (level == 0) != rep else INVALID)

    ttl_kind = draw(st.sampled_from(["absent", "absent", "int", "out", "string"]))
    if ttl_kind == "int":
        body["ttl"] = draw(st.integers(*SURE_LEASE))
    elif ttl_kind == "out":
        body["ttl"] = draw(st.one_of(st.integers(max_value=0), st.integers(min_value=MAX_LEASE_MS + 1)))
        worst(INVALID)
    elif ttl_kind == "string":
        body["ttl"] = "1000"
        worst(EITHER)
    if draw(st.integers(0, 9)) == 0:
        body[draw(st.sampled_from(["x", "stream", "host", "port"]))] = 1
        worst(EITHER)
    keys = draw(st.permutations(list(body)))
    encoded = json.dumps({key: body[key] for key in keys}).encode()  # orjson cannot write integers beyond 64 bits
    return encoded, verdict, registration if verdict != INVALID and len(registration) == 3 else None


def test_publish_post_bodies(scratch_http: RawHttp) -> None:
    """`POST /publish`: JSON bodies of every shape; accepted registrations are unpublished one by one."""

    @fuzz_settings(batch=5)
    @given(st.lists(publish_bodies(), min_size=5, max_size=5))
    def fuzz(batch: list[tuple[bytes, str, dict[str, Any] | None]]) -> None:
        for body, verdict, registration in batch:
            request = f"POST /publish {body[:300]!r}"
            expected = {413, 400} if verdict == "huge" else {400} if verdict == INVALID else {200, 400}
            if verdict == VALID:
                expected = {200}
            payload = _checked(scratch_http.post("/publish", body), expected, request)
            if payload is None:
                continue
            assert payload["status"] == "ok" and isinstance(payload["lease_ms"], int), f"{request}: {payload}"
            assert registration is not None, f"{request} was accepted: {payload}"
            assert 1 <= payload["streams"] <= len(registration["s"]), f"{request}: {payload}"
            _unpublish_round_trip(scratch_http, registration["s"], registration["h"], str(registration["p"]), request)

    _run(fuzz, scratch_http, REQUESTS_PER_FAMILY)


def test_unpublish_grammar(scratch_http: RawHttp) -> None:
    """`/unpublish` of registrations that do not exist: 404 when well-formed, else 400."""
    requests = st.fixed_dictionaries(
        {
            "s": _stream_name(),
            "h": host_param(),
            "p": integer_param(1, 65535, absent=0.1),
        }
    )

    @fuzz_settings()
    @given(st.lists(st.tuples(requests, UNKNOWN_PARAMS), min_size=BATCH, max_size=BATCH))
    def fuzz(batch: list[tuple[dict[str, Param | None], list[tuple[str, str]]]]) -> None:
        for params, extra in batch:
            target = "/unpublish" + query(params, extra)
            if any(params[name] is None for name in ("s", "h", "p")):
                expected = {400}
            else:
                expected = expected_statuses(list(params.values()), {404})
                h = params["h"]
                if h is not None and h.verdict == INVALID and INVALID not in {params["s"].verdict, params["p"].verdict}:
                    expected = {400, 404}  # a host nobody could have registered: refused, or simply not found
            _checked(scratch_http.get(target), expected, target)

    _run(fuzz, scratch_http, REQUESTS_PER_FAMILY)
