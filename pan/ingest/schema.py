"""Row schemas: what a stream's tuples may contain, checked where rows enter PAN.

A tuple that is stored is served to every subscriber for as long as the
buffer holds it, so one value that a reader cannot decode (an integer beyond
64 bits, a nested object where a number was expected) poisons the stream for
everyone.  Ingest is the only door into a stream, so it checks every row
against its stream's schema there, and names the reason when it refuses one.

A schema lists fields with a type and whether they are required; ``extra``
says whether other fields are allowed (as plain JSON scalars).  ``ts`` is
always a required integer in [0, ``TS_LIMIT``).  A stream without a declared
schema gets ``GENERIC``: ``ts`` plus any JSON scalars.

Workflow files declare schemas as JSON (``parse_schema``), e.g.
``{"fields": {"event": "str", "note": {"type": "str", "required": false}}, "extra": false}``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
#: Every ts is below this (it is also the watermark "end of stream", see pan.ingest.lines.END_OF_STREAM).
TS_LIMIT = 2**62
#: Longest string value a row may carry, in characters (rows are bounded in bytes too, at ingest).
MAX_STRING_CHARS = 4096

# Rejection reasons: the keys of the per-reason counters in `/streams` and `/metrics`.
NOT_INT64 = "not_int64"  # an integer (or integral number) outside the signed 64-bit range
TS_OUT_OF_RANGE = "ts_out_of_range"  # ts negative or >= TS_LIMIT
MISSING_FIELD = "missing_field"
WRONG_TYPE = "wrong_type"  # a value of another type than declared
NESTED = "nested_value"  # an object or array where only scalars are allowed
NOT_FINITE = "not_finite"
STRING_TOO_LONG = "string_too_long"
UNKNOWN_FIELD = "unknown_field"  # a field the stream's schema does not declare (and ``extra`` is off)
STREAM_MISMATCH = "stream_mismatch"  # a row whose key field names another stream than it was sent to

#: Field types a schema may declare.
INT, NUMBER, STR, BOOL, SCALAR = "int", "number", "str", "bool", "scalar"
FIELD_TYPES = (INT, NUMBER, STR, BOOL, SCALAR)


@dataclass(frozen=True, slots=True)
class Schema:
    """Fields by name as (type, required); ``ts`` is implied and always checked."""

    fields: dict[str, tuple[str, bool]] = field(default_factory=dict)
    extra: bool = True

    def check(self, row: dict[str, Any]) -> str | None:
        """The reason ``row`` breaks this schema, or None if it is valid."""
        problem = check_ts(row.get("ts", _MISSING))
        if problem is not None:
            return problem
        for name, (kind, required) in self.fields.items():
            if name not in row:
                if required:
                    return MISSING_FIELD
                continue
            problem = check_value(row[name], kind)
            if problem is not None:
                return problem
        fields = self.fields
        for name, value in row.items():
            if name == "ts" or name in fields:
                continue
            if not self.extra:
                return UNKNOWN_FIELD
            problem = check_value(value, SCALAR)
            if problem is not None:
                return problem
        return None


#: The schema of streams that declare none: ``ts`` and any JSON scalars.
GENERIC = Schema()

_MISSING = object()


def check_ts(ts: object) -> str | None:
    if ts is _MISSING:
        return MISSING_FIELD
    problem = check_value(ts, INT)
    if problem is not None:
        return problem
    return None if 0 <= ts < TS_LIMIT else TS_OUT_OF_RANGE  # type: ignore[operator]


def check_value(value: object, kind: str) -> str | None:
    """The reason ``value`` is not a valid ``kind``, or None."""
    kind_of = type(value)
    if kind_of is int:
        if not INT64_MIN <= value <= INT64_MAX:  # type: ignore[operator]
            return NOT_INT64
        return None if kind in (INT, NUMBER, SCALAR) else WRONG_TYPE
    if kind_of is float:
        if not math.isfinite(value):  # type: ignore[arg-type]
            return NOT_FINITE
        # An integer literal beyond 64 bits reaches us as a float (orjson), silently rounded: refuse every
        # integral float beyond int64, whatever its field (a sender that needs such values sends strings).
        # (-2**63 itself is refused too: -9223372036854775809 rounds to it.)
        if value.is_integer() and not INT64_MIN < value <= INT64_MAX:  # type: ignore[union-attr,operator]
            return NOT_INT64 if kind in (INT, NUMBER, SCALAR) else WRONG_TYPE
        return None if kind in (NUMBER, SCALAR) else WRONG_TYPE
    if kind_of is str:
        if len(value) > MAX_STRING_CHARS:  # type: ignore[arg-type]
            return STRING_TOO_LONG
        return None if kind in (STR, SCALAR) else WRONG_TYPE
    if kind_of is bool:
        return None if kind in (BOOL, SCALAR) else WRONG_TYPE
    if value is None:
        return None if kind == SCALAR else WRONG_TYPE
    if kind_of is dict or kind_of is list:
        return NESTED if kind == SCALAR else WRONG_TYPE
    return WRONG_TYPE


# --- declared schemas (workflow files) --------------------------------------------


def parse_schema(raw: object, where: str) -> tuple[Schema | None, list[str]]:
    """A schema from its workflow-file form, or the problems with it ("where: message")."""
    problems: list[str] = []
    if not isinstance(raw, dict):
        return None, [f"{where}: must be an object with 'fields' (and optionally 'extra')"]
    for key in sorted(set(raw) - {"fields", "extra"}):
        problems.append(f"{where}: unknown key '{key}' (allowed: extra, fields)")
    extra = raw.get("extra", False)
    if not isinstance(extra, bool):
        problems.append(f"{where}.extra: must be true or false, got {extra!r}")
    fields_raw = raw.get("fields", {})
    fields: dict[str, tuple[str, bool]] = {}
    if not isinstance(fields_raw, dict):
        problems.append(f"{where}.fields: must be an object of field name to type, got {fields_raw!r}")
        fields_raw = {}
    for name, spec in fields_raw.items():
        parsed = _parse_field(name, spec, f"{where}.fields.{name}", problems)
        if parsed is not None:
            fields[name] = parsed
    if problems:
        return None, problems
    return Schema(fields, bool(extra)), []


def _parse_field(name: str, spec: object, where: str, problems: list[str]) -> tuple[str, bool] | None:
    if name in ("ts", "i", "stream", "promise"):
        problems.append(f"{where}: '{name}' is reserved (ts is always a required integer)")
        return None
    if not name:
        problems.append(f"{where}: field names must be non-empty")
        return None
    if isinstance(spec, str):
        spec = {"type": spec}
    if not isinstance(spec, dict):
        problems.append(f"{where}: must be a type name or {{'type': ..., 'required': ...}}, got {spec!r}")
        return None
    for key in sorted(set(spec) - {"type", "required"}):
        problems.append(f"{where}: unknown key '{key}' (allowed: required, type)")
    kind = spec.get("type")
    required = spec.get("required", True)
    ok = True
    if kind not in FIELD_TYPES:
        problems.append(f"{where}.type: must be one of {', '.join(FIELD_TYPES)}, got {kind!r}")
        ok = False
    if not isinstance(required, bool):
        problems.append(f"{where}.required: must be true or false, got {required!r}")
        ok = False
    return (kind, required) if ok else None  # type: ignore[return-value]
