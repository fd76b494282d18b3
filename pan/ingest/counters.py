"""What an ingest server counts: connections, rows, promises, and every refusal by its reason.

Apart because the line parser (pan/ingest/lines.py), the promise checks (pan/ingest/promises.py) and the
server itself all count into the same ``IngestCounters``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# Reasons, beyond pan.ingest.schema's, in the ``rejected`` and ``promises_refused`` counters.
ROW_TOO_LARGE = "row_too_large"
NOT_SENDER = "not_sender"  # a promise for a stream whose data another connection carries
TOO_FAR_AHEAD = "too_far_ahead"  # a promise beyond the connection's newest ts + promise_ahead_ms


def bump(counts: dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


@dataclass
class IngestCounters:
    connections: int = 0  # accepted
    open_connections: int = 0
    refused_connections: int = 0  # over max_connections_per_address
    idle_timeouts: int = 0  # connections closed after idle_timeout_s without a byte
    rows: int = 0
    malformed: int = 0
    unexpected: int = 0
    truncated: int = 0
    oversized: int = 0  # lines over MAX_LINE_BYTES, skipped unread
    promises: int = 0  # accepted promise lines (no data): not in ``rows``
    idle_declared: int = 0  # times a stream was declared idle (silent for idle_after_ms while others went on)
    idle_promises: int = 0  # promises this server made for idle streams
    behind_promise: int = 0  # rows older than a promise already made for their stream (late downstream)
    #: Well-formed rows that break their stream's schema or size limit, per reason.
    rejected: dict[str, int] = field(default_factory=dict)
    promises_refused: dict[str, int] = field(default_factory=dict)
    per_stream: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Every counter by its field name, with copies of the per-reason and per-stream maps."""
        return asdict(self)
