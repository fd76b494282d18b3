"""What the HTTP fuzz tests share (issue 10, build item 11): the streams the forwarder holds, and the checks.

The ``test_fuzz_http_*.py`` files fuzz the HTTP grammars of a real worker and real repositories.

One forwarder and two repositories serve from a background thread for the
whole package (this folder's ``conftest.py``, with ``tests/support/live_servers.py``);
Hypothesis sends each family of requests over one keep-alive connection.  For every answer:

- never a 5xx, and every non-2xx answer is ``{"status":"error","error":str}``
  as application/json, including aiohttp's own refusals (bad HTTP, long
  request lines and headers, non-UTF-8 bytes);
- the status is the one the contract predicts (``tests/support/fuzz_grammar.py``
  tags every value valid, invalid or open): 400 for a bad parameter, 404 for
  an unknown stream, 200 otherwise;
- a 200 answer has the documented shape and, for `/data`, exactly the tuples
  the buffer holds for the request.

``REQUESTS_PER_FAMILY`` requests go to each family: a few hundred by
default, 10,000 with CI=true or PAN_SLOW=1 (the acceptance bar).
"""

from __future__ import annotations

from typing import Any

from tests.support.fuzz_grammar import SLOW
from tests.support.live_servers import Answer, RawHttp, check_error_contract

FULL, SHORT, EMPTY = "SENSOR4", "SENSOR8", "SENSOR12"
STREAMS = [FULL, SHORT, EMPTY]
BUFFER = 200
#: Tuples ingested per stream before fuzzing: FULL wraps its buffer (so `missed` is exercised), SHORT does not.
PREFILL = {FULL: 300, SHORT: 3, EMPTY: 0}
SID = {FULL: 4, SHORT: 8, EMPTY: 12}
LEVELS = 1000


def _checked(answer: Answer, expected: set[int], request: str) -> Any:
    """The error contract and the predicted status; the JSON payload of a 2xx answer."""
    check_error_contract(answer)
    assert answer.status in expected, f"{request}: expected {sorted(expected)}, got {answer.describe()}"
    if answer.status != 200:
        return None
    assert answer.content_type.split(";")[0] == "application/json", f"{request}: {answer.describe()}"
    return answer.json()


def _run(test: Any, client: RawHttp, minimum: int) -> None:
    """Run a Hypothesis test and check that the family got its share of requests."""
    before = client.sent
    test()
    if SLOW:
        assert client.sent - before >= minimum, f"only {client.sent - before} requests generated"
