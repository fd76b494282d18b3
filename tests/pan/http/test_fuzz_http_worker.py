"""Fuzzing the worker's `/data` grammar, then checking all three servers after the whole fuzz run.

What every answer must satisfy is in ``fuzz_http_servers.py``.  This is the last fuzz file by name, so
``test_servers_answer_after_fuzzing`` runs after every family of the package-scoped servers was sent.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pan.wire.data_query import DEFAULT_PAGE, MAX_PAGE
from tests.pan.http.fuzz_http_servers import BUFFER, FULL, PREFILL, SID, STREAMS, _checked, _run
from tests.support.fuzz_grammar import (
    BATCH,
    EITHER,
    INT64_MAX,
    INVALID,
    REQUESTS_PER_FAMILY,
    UNKNOWN_PARAMS,
    VALID,
    Param,
    bool_param,
    expected_statuses,
    fuzz_settings,
    integer_param,
    integer_pool,
    pick,
    query,
    stream_param,
)
from tests.support.live_servers import LiveServers, LogCounter, RawHttp

pytestmark = pytest.mark.timeout(900)

MAX_WAIT_MS = 60_000


# --- /data -----------------------------------------------------------------------------------------


DATA_REQUESTS = st.fixed_dictionaries(
    {
        "s": stream_param(STREAMS),
        # indices near the buffer's (where pages are interesting) and anywhere in int64
        "i": pick(integer_pool(-1, INT64_MAX, valid=(-1, 400)) + integer_pool(-1, INT64_MAX), absent=0.25),
        "l": integer_param(1, MAX_PAGE, valid=(1, 250), absent=0.75),
        "n": integer_param(1, MAX_PAGE, valid=(1, 250), absent=0.75),
        # A valid long poll is kept short: w=60000 on a quiet stream is a correct one-minute answer.
        "w": integer_param(0, MAX_WAIT_MS, valid=(0, 20), absent=0.6),
        "m": bool_param(absent=0.6),
    }
)


def expected_data_indices(state: tuple[int, int], after: int, oldest: int | None, latest: int | None) -> list[int]:
    first, last = state
    held = [k for k in range(first, last + 1) if k > after] if first >= 0 else []
    return held[-latest:] if latest is not None else held[: oldest or DEFAULT_PAGE]


def check_data_answer(payload: dict[str, Any], params: dict[str, Param | None], request: str) -> None:
    s = params["s"]
    assert s is not None
    stream = s.value
    after = params["i"].value if params["i"] is not None else -1
    latest = params["l"].value if params["l"] is not None else None
    oldest = params["n"].value if params["n"] is not None else None
    first = PREFILL[stream] - BUFFER if PREFILL[stream] > BUFFER else (0 if PREFILL[stream] else -1)
    last = PREFILL[stream] - 1
    assert payload["status"] == "ok" and payload["stream"] == stream, request
    assert (payload["first"], payload["last"]) == (first, last), f"{request}: {payload}"
    indices = [t["i"] for t in payload["tuples"]]
    assert indices == expected_data_indices((first, last), after, oldest, latest), f"{request}: {indices}"
    assert all(t["sid"] == SID[stream] for t in payload["tuples"]), request
    missed = max(0, first - after - 1) if first >= 0 else 0
    assert payload["missed"] == missed, f"{request}: missed {payload['missed']}, expected {missed}"
    assert isinstance(payload["meta"], dict) and isinstance(payload["meta"].get("epoch"), str), request


def test_data_grammar(worker_http: RawHttp) -> None:
    """`/data`: s, i, l|n, w, m and unknown parameters in every spelling; exact pages for valid ones."""

    @fuzz_settings()
    @given(st.lists(st.tuples(DATA_REQUESTS, UNKNOWN_PARAMS), min_size=BATCH, max_size=BATCH))
    def fuzz(batch: list[tuple[dict[str, Param | None], list[tuple[str, str]]]]) -> None:
        for params, extra in batch:
            target = "/data" + query(params, extra)
            s = params["s"]
            if s is None or s.verdict == INVALID or (params["l"] is not None and params["n"] is not None):
                expected = {400}
            else:
                known = s.value in STREAMS and s.verdict == VALID
                expected = expected_statuses(list(params.values()), {200} if known else {404})
                if s.verdict == EITHER:
                    expected |= {400}
            payload = _checked(worker_http.get(target), expected, target)
            if payload is not None:
                check_data_answer(payload, params, target)

    _run(fuzz, worker_http, REQUESTS_PER_FAMILY)


# --- afterwards -------------------------------------------------------------------------------------------


def test_servers_answer_after_fuzzing(
    servers: LiveServers, worker_http: RawHttp, repo_http: RawHttp, scratch_http: RawHttp, log_counter: LogCounter
) -> None:
    """Still healthy, nothing lost, the scratch registry empty again, and no traceback in the logs."""
    for client in (worker_http, repo_http, scratch_http):
        answer = client.get("/health")
        assert answer.status == 200 and answer.json()["status"] == "ok", answer.describe()
    for target in ("/streams", "/metrics", "/debug"):
        answer = worker_http.get(target)
        assert answer.status == 200, f"{target}: {answer.describe()}"
    assert worker_http.get(f"/data?s={FULL}&l=1").json()["last"] == PREFILL[FULL] - 1
    answer = repo_http.get("/streams")
    assert answer.status == 200 and set(STREAMS) <= set(answer.json()["streams"]), answer.describe()
    leftovers = scratch_http.get("/streams")
    assert leftovers.status == 200, leftovers.describe()
    assert not leftovers.json()["streams"], f"registrations left behind: {leftovers.body[:500]!r}"
    assert log_counter.at_least(logging.ERROR) == 0, f"errors logged: {log_counter.errors}"
    # Refusals are logged rate-limited (README: at most 10 lines per 10 s, then a count): thousands of bad
    # requests must leave a few lines per 10 s, however long the run.  Generous: a few rate limiters.
    windows = (time.monotonic() - log_counter.started) / 10 + 1
    warnings = log_counter.at_least(logging.WARNING)
    assert warnings <= 50 * windows, f"{warnings} warnings in {windows:.0f} windows of 10 s: not rate-limited"
