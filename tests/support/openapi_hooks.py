"""schemathesis hooks for the slow OpenAPI run (loaded through SCHEMATHESIS_HOOKS by tests/pan/http/test_openapi.py).

A valid `/data` or `POST /pages` long poll may last 60 s (``w`` up to 60,000 ms on a quiet
stream): a correct answer, but thousands of them would not fit any test run.
Generated waits are capped; everything else is sent as generated.
"""

from __future__ import annotations

from typing import Any

import schemathesis

#: Longest long poll a generated `/data` request may ask for, in milliseconds.
MAX_GENERATED_WAIT_MS = 20


@schemathesis.hook
def map_query(context: Any, query: dict[str, Any] | None) -> dict[str, Any] | None:
    operation = getattr(context, "operation", None)
    if query and operation is not None and operation.path == "/data":
        wait = query.get("w")
        if isinstance(wait, int) and not isinstance(wait, bool) and wait > MAX_GENERATED_WAIT_MS:
            query["w"] = MAX_GENERATED_WAIT_MS
    return query


@schemathesis.hook
def map_body(context: Any, body: Any) -> Any:
    operation = getattr(context, "operation", None)
    if isinstance(body, dict) and operation is not None and operation.path == "/pages":
        wait = body.get("w")
        if isinstance(wait, int) and not isinstance(wait, bool) and wait > MAX_GENERATED_WAIT_MS:
            body["w"] = MAX_GENERATED_WAIT_MS
    return body
