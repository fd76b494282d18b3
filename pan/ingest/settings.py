"""The settings of an ingest server: a forwarder's ``params`` for its door, their defaults and limits.

Apart from the server (pan/ingest/server.py) because they are configuration: a forwarder's params are
checked (``parse_ingest_params``) when its spec is read, before any socket, and senders take the defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pan.ingest.decoders import RowDecoder, decoder_types, get_decoder_type
from pan.ingest.schema import Schema, parse_schema

MAX_LINE_BYTES = 64 * 1024  # longer lines are skipped while reading, before any parsing (``oversized``)
#: Below this many lines a read is cheaper line by line than as a numpy block (`pan bench ingest`, read sizes,
#: 2026-11-28: 10 rows cost 9.7 us/row as a block and 4.3 line by line, 30 rows 6.6 and 6.3, 63 rows 3.2 and
#: 4.2); a 200 Hz source on its own connection in an unpaced replay writes 40 rows at a time (a 200 ms slice).
BLOCK_MIN_LINES = 32

# --- settings (forwarder ``params``), with their defaults -------------------------------------

#: Rows longer than this are refused (``rejected.row_too_large``); typical rows are ~100 bytes.
DEFAULT_MAX_ROW_BYTES = 16 * 1024
#: How far (event time) a promise may run ahead of the newest ts its connection sent for the stream.
DEFAULT_PROMISE_AHEAD_MS = 10_000
#: A connection that sends nothing for this long is closed (without ending its streams).
#: Long enough for a source that pauses, e.g. during a break in the data that is not cut out.
DEFAULT_IDLE_TIMEOUT_S = 60.0
#: Concurrent connections per remote address; `pan simulate` opens one per stream (~45) per run.
DEFAULT_MAX_CONNECTIONS_PER_ADDRESS = 256
#: A stream that sends nothing (no row, no promise) for this long while others go on is declared idle
#: and promised for (0: never). Longer than a source's usual dropouts and a simulated outage.
DEFAULT_IDLE_AFTER_MS = 5_000
MAX_IDLE_TIMEOUT_S = 86_400.0
MAX_PROMISE_AHEAD_MS = 10**9  # ~11 days of event time

#: The forwarder's params that set up its door: how non-JSON lines are read (``decoder``) and the limits.
INGEST_PARAMS = (
    "decoder", "max_row_bytes", "promise_ahead_ms", "idle_timeout_s", "max_connections_per_address", "schemas",
    "idle_after_ms", "parse_blocks",
)


@dataclass(frozen=True)
class IngestSettings:
    max_row_bytes: int = DEFAULT_MAX_ROW_BYTES
    promise_ahead_ms: int = DEFAULT_PROMISE_AHEAD_MS
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    max_connections_per_address: int = DEFAULT_MAX_CONNECTIONS_PER_ADDRESS
    idle_after_ms: int = DEFAULT_IDLE_AFTER_MS
    #: Declared schemas by stream; other streams get their decoder's layout (if it claims them) or ``GENERIC``.
    schemas: Mapping[str, Schema] = field(default_factory=dict)
    #: Reads the non-JSON lines (``params.decoder``); None: JSON lines only.
    decoder: type[RowDecoder] | None = None
    #: Parse the lines of each read together when the decoder reads integer CSV (False: line by line).
    parse_blocks: bool = True
    #: Fewer complete lines than this in a read go line by line even so: numpy's fixed cost per block
    #: (tens of calls) is more than the per-line path's for a few rows (`pan bench ingest`, small reads).
    block_min_lines: int = BLOCK_MIN_LINES


def parse_ingest_params(params: Mapping[str, Any], streams: list[str]) -> tuple[IngestSettings, list[str]]:
    """Settings from a forwarder's ``params``, and every problem as "key: message"."""
    problems: list[str] = []

    def integer(key: str, default: int, lo: int, hi: int) -> int:
        value = params.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            problems.append(f"{key}: must be an integer in {lo}..{hi}, got {value!r}")
            return default
        return value

    max_row = integer("max_row_bytes", DEFAULT_MAX_ROW_BYTES, 64, MAX_LINE_BYTES)
    ahead = integer("promise_ahead_ms", DEFAULT_PROMISE_AHEAD_MS, 0, MAX_PROMISE_AHEAD_MS)
    per_address = integer("max_connections_per_address", DEFAULT_MAX_CONNECTIONS_PER_ADDRESS, 1, 1_000_000)
    idle_after = integer("idle_after_ms", DEFAULT_IDLE_AFTER_MS, 0, int(MAX_IDLE_TIMEOUT_S * 1000))
    idle = params.get("idle_timeout_s", DEFAULT_IDLE_TIMEOUT_S)
    if isinstance(idle, bool) or not isinstance(idle, int | float) or not 0 < idle <= MAX_IDLE_TIMEOUT_S:
        problems.append(f"idle_timeout_s: must be a number of seconds in (0, {MAX_IDLE_TIMEOUT_S:.0f}], got {idle!r}")
        idle = DEFAULT_IDLE_TIMEOUT_S
    parse_blocks = params.get("parse_blocks", True)
    if not isinstance(parse_blocks, bool):
        problems.append(f"parse_blocks: must be true or false, got {parse_blocks!r}")
        parse_blocks = True
    decoder = None
    name = params.get("decoder")
    if name is not None:
        decoder = get_decoder_type(name) if isinstance(name, str) else None
        if decoder is None:
            known = ", ".join(sorted(decoder_types())) or "none installed"
            problems.append(f"decoder: unknown row decoder {name!r} (known: {known})")
    schemas: dict[str, Schema] = {}
    raw_schemas = params.get("schemas", {})
    if not isinstance(raw_schemas, dict):
        problems.append(f"schemas: must be an object of stream name to schema, got {raw_schemas!r}")
        raw_schemas = {}
    for stream, raw in raw_schemas.items():
        where = f"schemas.{stream}"
        if stream not in streams:
            problems.append(f"{where}: '{stream}' is not one of this worker's inter_pan_inputs")
        elif decoder is not None and decoder.claims(stream):
            kind = f"{decoder.row_kind} ({decoder.name})"
            problems.append(f"{where}: '{stream}' receives {kind}; its schema is their layout")
        schema, schema_problems = parse_schema(raw, where)
        problems += schema_problems
        if schema is not None:
            schemas[stream] = schema
    settings = IngestSettings(max_row, ahead, float(idle), per_address, idle_after, schemas, decoder, parse_blocks)
    return settings, problems
