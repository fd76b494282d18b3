"""Ingest lines: the promise line, what a line is parsed into, and ``LineParser``, which checks each line.

The line format is described in pan/ingest/server.py. Apart from the server because a line is parsed
without a socket: ``LineParser`` turns bytes into (stream, row) or (stream, ``Promise``) and counts every
line it refuses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from pan.ingest.counters import ROW_TOO_LARGE, IngestCounters, bump
from pan.ingest.decoders import JSON_ROWS, RowFormat
from pan.ingest.schema import GENERIC, TS_LIMIT, WRONG_TYPE
from pan.ingest.settings import IngestSettings
from pan.util.ratelimit import RateLimitedLog
from pan.wire.progress import END_OF_STREAM as ORDERING_END

#: Under the server's name wherever the code is: what the ingest door logs is one logger to configure.
log = logging.getLogger("pan.ingest.server")

#: A promise of this ts ends a stream: nothing more will come (``pan simulate`` sends it when a source's data
#: is exhausted). Closing a connection does not end its streams.
END_OF_STREAM = TS_LIMIT
assert END_OF_STREAM == ORDERING_END
#: The key of a promise line, ``{"stream": S, "ts": T, "promise": true}``: no row of S older than T
#: follows. It carries no data; a sender uses it for a source that is quiet or has no data at all.
PROMISE = "promise"


def promise_line(stream: str, ts: int = END_OF_STREAM) -> bytes:
    return orjson.dumps({"stream": stream, "ts": ts, PROMISE: True})


@dataclass(frozen=True, slots=True)
class Promise:
    """A parsed promise line: no row of its stream older than ``ts`` follows (checked by the server)."""

    ts: object


#: A parsed data line: a JSON object, or a row in the layout of the decoder that claims its stream.
Row = Any
#: Receives each read's rows per stream, in arrival order: a list, or a ``pan.wire.int_csv.RowBlock`` (a sequence of
#: the same rows, parsed as a block) that ``pan.ingest.decoders.encode_batches`` stores in one pass.
Deliver = Callable[[dict[str, Sequence[Row]]], None]
#: Receives, per stream, the newest ts promised (END_OF_STREAM: the stream ended); the server's idle promises too.
OnPromise = Callable[[dict[str, int]], None]


class LineParser:
    """Turns one line into (stream, row), counting every line it rejects and why."""

    def __init__(
        self,
        expected: set[str],
        counters: IngestCounters,
        settings: IngestSettings | None = None,
        problems: RateLimitedLog | None = None,
    ) -> None:
        self.expected = expected
        self.counters = counters
        self.settings = settings or IngestSettings()
        self.problems = problems or RateLimitedLog(log)
        self._max_row = self.settings.max_row_bytes
        decoder_type = self.settings.decoder
        self.decoder = None if decoder_type is None else decoder_type(expected, self)
        #: The hot path for non-JSON lines: the decoder's own method, called without a step in between.
        self._decode: Callable[[bytes], tuple[str, Row] | None] = (
            self.malformed if self.decoder is None else self.decoder.decode
        )
        self._formats: dict[str, RowFormat] = {}

    def parse(self, line: bytes) -> tuple[str, Row | Promise] | None:
        if len(line) > self._max_row:
            return self.reject(ROW_TOO_LARGE, "", line)
        if line[0] == 0x7B:  # "{"
            return self._parse_json(line)
        return self._decode(line)

    def row_format(self, stream: str) -> RowFormat:
        """How ``stream``'s rows are read and stored: its decoder's layout if the decoder claims it, else JSON."""
        fmt = self._formats.get(stream)
        if fmt is None:
            claimed = self.decoder is not None and self.decoder.claims(stream)
            fmt = self._formats[stream] = self.decoder if claimed else JSON_ROWS  # type: ignore[assignment]
        return fmt

    def _parse_json(self, line: bytes) -> tuple[str, Row | Promise] | None:
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            return self.malformed(line)
        if type(row) is not dict:
            return self.malformed(line)
        stream = row.pop("stream", None)
        ts = row.get("ts")
        if type(stream) is not str or not stream or type(ts) not in (int, float):
            return self.malformed(line)
        if stream not in self.expected:
            return self.unexpected(stream, line)
        promise = row.pop(PROMISE, None)
        if promise is True:
            return stream, Promise(ts)
        if promise is not None and promise is not False:
            return self.reject(WRONG_TYPE, stream, line)
        row.pop("i", None)  # indices are assigned by the producer, never by senders
        parsed = self._check(stream, row)
        if type(parsed) is str:
            return self.reject(parsed, stream, line)
        return stream, parsed  # type: ignore[return-value]

    def _check(self, stream: str, row: dict[str, Any]) -> Row | str:
        """The row as it is stored, or the reason it breaks the stream's schema.

        A stream the decoder claims always has the decoder's layout, so all its rows are alike.
        """
        fmt = self.row_format(stream)
        if fmt is JSON_ROWS:
            return (self.settings.schemas.get(stream) or GENERIC).check(row) or row
        return self.decoder.from_json(stream, row)  # type: ignore[union-attr]

    def malformed(self, line: bytes) -> None:
        self.counters.malformed += 1
        self.problems.warning("ingest: malformed line: %r", line[:200])

    def unexpected(self, stream: str, line: bytes) -> None:
        self.counters.unexpected += 1
        self.problems.warning("ingest: unexpected stream %r: %r", stream[:100], line[:200])

    def reject(self, reason: str, stream: str, line: bytes) -> None:
        bump(self.counters.rejected, reason)
        self.problems.warning("ingest: row for %r refused (%s): %r", stream[:100], reason, line[:200])
