"""Fuzzing raw HTTP: what aiohttp parses (or refuses) before any handler of the worker or repository runs.

Malformed requests, huge request lines and headers and non-UTF-8 bytes must be answered as JSON errors,
never 5xx (``fuzz_http_servers.py`` has the whole contract).
"""

from __future__ import annotations

import orjson
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tests.support.fuzz_grammar import BATCH, REQUESTS_PER_FAMILY, SLOW, fuzz_settings
from tests.support.live_servers import RawHttp, check_error_contract

pytestmark = pytest.mark.timeout(900)

ROUTES = [b"/data", b"/streams", b"/health", b"/metrics", b"/debug", b"/publish", b"/unpublish", b"/subscribe"]
TOKEN = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12)
#: Header names the request builder sets itself (a random one could make the server wait for a body).
FRAMING = {"content-length", "transfer-encoding", "host", "connection", "expect"}


@st.composite
def raw_requests(draw: st.DrawFn) -> tuple[bytes, bool]:
    """Bytes of one complete request (the server never has to wait for more), and whether it is a HEAD."""
    method = draw(
        st.one_of(
            st.sampled_from([b"GET"] * 6 + [b"POST", b"HEAD", b"PUT", b"DELETE", b"OPTIONS", b"PATCH", b"get"]),
            st.binary(min_size=1, max_size=8).filter(lambda b: b"\r" not in b and b"\n" not in b),
        )
    )
    path = draw(
        st.one_of(
            st.sampled_from(ROUTES),
            st.sampled_from([b"/", b"*", b"//data", b"/data/", b"/%2e%2e/etc/passwd", b"/d%00ta", b"http://x/data"]),
            st.binary(max_size=20).map(lambda b: b"/" + b.replace(b"\r", b"").replace(b"\n", b"")),
        )
    )
    query_kind = draw(st.sampled_from(["none", "text", "bytes", "long", "known"]))
    if query_kind == "text":
        path += b"?" + draw(st.text(max_size=40)).encode("utf-8").replace(b"\r", b"").replace(b"\n", b"")
    elif query_kind == "bytes":  # raw non-UTF-8 and control bytes in the request line
        path += b"?s=" + draw(st.binary(max_size=30)).replace(b"\r", b"").replace(b"\n", b"")
    elif query_kind == "long":  # request lines around and far beyond 8 KiB
        path += b"?s=" + b"x" * draw(st.sampled_from([8_000, 8_180, 8_200, 16_000, 70_000]))
    elif query_kind == "known":
        path += draw(st.sampled_from([b"?s=SENSOR4", b"?s=SENSOR4&i=%ff", b"?s=%C3%28", b"?s=SENSOR4&i=1&i=2"]))
    version = draw(st.sampled_from([b"HTTP/1.1"] * 6 + [b"HTTP/1.0", b"HTTP/2.0", b"HTTP/9.9", b"HTTX/1.1", b""]))
    lines = [method + b" " + path + (b" " + version if version else b""), b"Host: 127.0.0.1"]
    header_kind = draw(st.sampled_from(["few"] * 4 + ["huge_value", "many", "binary", "folded", "no_colon"]))
    if header_kind == "few":
        for name, value in draw(st.lists(st.tuples(TOKEN, st.text(max_size=20)), max_size=3)):
            if name.lower() not in FRAMING:
                lines.append(name.encode() + b": " + value.encode().replace(b"\r", b"").replace(b"\n", b""))
    elif header_kind == "huge_value":
        lines.append(b"X-Big: " + b"v" * draw(st.sampled_from([8_000, 8_200, 20_000, 70_000])))
    elif header_kind == "many":
        lines += [b"X-%d: %d" % (k, k) for k in range(draw(st.sampled_from([90, 101, 129, 300])))]
    elif header_kind == "binary":
        lines.append(b"X-Bin: " + draw(st.binary(min_size=1, max_size=20)).replace(b"\r", b"").replace(b"\n", b""))
    elif header_kind == "folded":
        lines += [b"X-Fold: a", b" continued"]
    else:
        lines.append(b"NoColonHere")
    expect = draw(st.sampled_from([None] * 8 + [b"100-continue", b"bogus"]))
    if expect is not None:
        lines.append(b"Expect: " + expect)
    body_kind = draw(st.sampled_from(["none"] * 4 + ["sized", "chunked", "bad_chunk", "bad_length", "json"]))
    body = b""
    if body_kind == "sized":
        body = draw(st.binary(max_size=200))
        lines.append(b"Content-Length: %d" % len(body))
    elif body_kind == "json":
        body = orjson.dumps({"s": ["A"], "h": "127.0.0.1", "p": 9})
        lines += [b"Content-Type: application/json", b"Content-Length: %d" % len(body)]
    elif body_kind == "chunked":
        data = draw(st.binary(min_size=1, max_size=50))
        lines.append(b"Transfer-Encoding: chunked")
        body = b"%x\r\n" % len(data) + data + b"\r\n0\r\n\r\n"
    elif body_kind == "bad_chunk":
        lines.append(b"Transfer-Encoding: chunked")
        body = draw(st.sampled_from([b"zz\r\n", b"-1\r\n", b"ffffffffffffffffffff\r\n"]))
    elif body_kind == "bad_length":
        lines.append(b"Content-Length: " + draw(st.sampled_from([b"-1", b"abc", b"1 2", b"0x10", b"+0", b"1e3"])))
    if draw(st.booleans()):
        lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n" + body, method == b"HEAD"


#: Requests the issue reports answered as text/plain (finding 8), always sent first.
KNOWN_BAD_HTTP = [
    b"GET /data?s=" + b"x" * 9_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",  # query over 8 KB
    b"GET /data?s=\xff\xfe HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",  # non-UTF-8 bytes
    b"GET /data?s=%ff%fe HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",  # ... percent-encoded
    b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"v" * 9_000 + b"\r\n\r\n",  # huge header
    b"GARBAGE\r\n\r\n",  # bad HTTP
    b"GET /health HTTP/3.7\r\nHost: 127.0.0.1\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: bogus\r\n\r\n",
]


def test_raw_http(worker_http: RawHttp, repo_http: RawHttp) -> None:
    """Malformed HTTP, huge request lines and headers, non-UTF-8 bytes: answered as JSON errors, never 5xx."""
    clients = [worker_http, repo_http]  # not the scratch repository: a stray registration there would outlive the test

    @fuzz_settings()
    @given(st.lists(st.tuples(raw_requests(), st.integers(0, 1)), min_size=BATCH, max_size=BATCH))
    @example([((raw, False), server) for raw in KNOWN_BAD_HTTP for server in (0, 1)])
    def fuzz(batch: list[tuple[tuple[bytes, bool], int]]) -> None:
        for (raw, head), server in batch:
            answer = clients[server].send(raw, head=head, fresh=True)
            try:
                check_error_contract(answer, head=head)
                if 200 <= answer.status < 300 and answer.content_type.startswith("application/json") and not head:
                    answer.json()  # a 2xx JSON answer parses
            except (AssertionError, orjson.JSONDecodeError) as exc:
                raise AssertionError(f"{exc}\nrequest: {raw[:400]!r}") from None

    before = sum(client.sent for client in clients)
    fuzz()
    if SLOW:
        assert sum(client.sent for client in clients) - before >= REQUESTS_PER_FAMILY
