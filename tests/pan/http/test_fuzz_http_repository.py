"""Fuzzing the repository's `/subscribe` grammar and its `/streams` and `/debug` pages.

What every answer must satisfy is in ``fuzz_http_servers.py``; registrations are fuzzed in
``test_fuzz_http_publish.py``.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.pan.http.fuzz_http_servers import LEVELS, STREAMS, _checked, _run
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
    endpoint_list_param,
    expected_statuses,
    fuzz_settings,
    integer_param,
    pick,
    query,
    stream_param,
)
from tests.support.live_servers import HOST, LiveServers, RawHttp, check_error_contract

pytestmark = pytest.mark.timeout(900)


# --- /subscribe --------------------------------------------------------------------------------------


def test_subscribe_grammar(servers: LiveServers, repo_http: RawHttp) -> None:
    """`/subscribe`: s, norep, lvl, exclude; the forwarder is chosen exactly when the filters allow it."""
    endpoint = f"{HOST}:{servers.worker_port}"
    requests = st.fixed_dictionaries(
        {
            "s": stream_param(STREAMS),
            "norep": bool_param(),
            "lvl": integer_param(0, LEVELS, absent=0.6),
            "exclude": endpoint_list_param(endpoint),
        }
    )

    @fuzz_settings()
    @given(st.lists(st.tuples(requests, UNKNOWN_PARAMS), min_size=BATCH, max_size=BATCH))
    def fuzz(batch: list[tuple[dict[str, Param | None], list[tuple[str, str]]]]) -> None:
        for params, extra in batch:
            target = "/subscribe" + query(params, extra)
            s, lvl, exclude = params["s"], params["lvl"], params["exclude"]
            if s is None or s.verdict == INVALID:
                expected = {400}
            else:
                allowed = (
                    s.verdict == VALID
                    and s.value in STREAMS
                    and (lvl is None or lvl.value is None or lvl.value > 0)  # the forwarder has level 0
                    and (exclude is None or (HOST, servers.worker_port) not in exclude.value)
                )
                expected = expected_statuses(list(params.values()), {200} if allowed else {404})
                if s.verdict == EITHER:
                    expected |= {400}
            payload = _checked(repo_http.get(target), expected, target)
            if payload is not None:
                assert payload == {
                    "status": "ok",
                    "stream": s.value,
                    "host": HOST,
                    "port": servers.worker_port,
                    "rep": False,
                    "lvl": 0,
                }, f"{target}: {payload}"

    _run(fuzz, repo_http, REQUESTS_PER_FAMILY)


# --- the repository's pages ---------------------------------------------------------------------------


def test_registry_pages(repo_http: RawHttp) -> None:
    """`/streams` and `/debug` pages: `after`, `limit`; names in order, after `after`, at most `limit`."""
    requests = st.fixed_dictionaries(
        {
            "after": pick(
                [Param(s, VALID, s) for s in ["", "A", "SENSOR", "SENSOR4", "SENSOR8", "Z", *PLAIN_NAMES[:20]]]
                + [Param(s, EITHER, s) for s in ODD_NAMES[:10]]
                + [Param(b, INVALID) for b in NON_UTF8],
                absent=0.4,
            ),
            "limit": integer_param(1, 10_000, valid=(1, 5), absent=0.4),
        }
    )

    @fuzz_settings()
    @given(st.lists(st.tuples(st.sampled_from(["/streams", "/debug"]), requests), min_size=BATCH, max_size=BATCH))
    def fuzz(batch: list[tuple[str, dict[str, Param | None]]]) -> None:
        for path, params in batch:
            target = path + query(params)
            expected = expected_statuses(list(params.values()), {200})
            answer = repo_http.get(target)
            check_error_contract(answer)
            assert answer.status in expected, f"{target}: expected {sorted(expected)}, got {answer.describe()}"
            if answer.status != 200:
                continue
            if path == "/debug":
                assert answer.content_type.startswith("text/html"), f"{target}: {answer.describe()}"
                continue
            page = answer.json()
            names = list(page["streams"])
            after, limit = params["after"], params["limit"]
            assert names == sorted(names), f"{target}: {names}"
            if after is not None and after.value:
                assert all(name > after.value for name in names), f"{target}: {names}"
            if limit is not None and limit.value is not None:
                assert len(names) <= limit.value, f"{target}: {names}"
            assert page["next"] is None or page["next"] == names[-1], f"{target}: {page['next']!r} after {names}"

    _run(fuzz, repo_http, REQUESTS_PER_FAMILY)
