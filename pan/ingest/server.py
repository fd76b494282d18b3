"""Inter-PAN ingest: newline-delimited rows over plain TCP, checked at the door.

A line that starts with ``{`` is a JSON object with at least ``stream`` and
``ts`` (with ``"promise": true`` it is a promise, not data: see ``PROMISE``);
any other line is read by the forwarder's row decoder (the ``pan.decoders`` entry points,
chosen by ``params.decoder``), and is malformed when it has none. Nothing a
sender writes can stop the server or poison a stream:

- every row is checked against its stream's schema (``pan.ingest.schema``): streams
  a decoder claims have its layout (JSON rows into them too), other streams
  a declared schema or the generic one; refused rows are counted per reason
  and logged with a rate limit;
- a promise must be an int64 and may not run ahead of the data by more than
  ``promise_ahead_ms``; while a connection carries a stream's data, only it
  may promise for that stream;
- rows over ``max_row_bytes`` are refused, idle connections are closed, and
  each remote address may hold only so many connections at once.

Everything valid is delivered in arrival order.

When the decoder reads plain integer CSV (``RowDecoder.int_csv``), the
complete lines of each read are parsed together with numpy
(``pan.wire.int_csv``); the lines that block parser does not take go through the
per-line path above, in their place. Both paths deliver the same rows and
count the same refusals; ``params.parse_blocks: false`` keeps every line on
the per-line path (the reference, for tests and ``pan bench ingest``).

A closed connection is not the end of its streams: a source that reconnects
resumes them. The end is said explicitly, with a promise of ``END_OF_STREAM``.
Idleness is decided here, at the edge, and nowhere downstream: a stream that
sends nothing (no row, no promise) for ``idle_after_ms`` of wall time while
other streams of this server go on is declared idle, and the server promises
for it the slowest progress of its active streams (Flink's idle sources).
Rows it sends afterwards resume it; those older than that promise are late
downstream (and counted here as ``behind_promise``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import orjson

from pan.ingest.decoders import JSON_ROWS, RowDecoder, RowFormat, decoder_types, get_decoder_type
from pan.ingest.schema import (
    GENERIC,
    INT,
    TS_LIMIT,
    TS_OUT_OF_RANGE,
    WRONG_TYPE,
    Schema,
    check_value,
    parse_schema,
)
from pan.ordering.units import END_OF_STREAM as ORDERING_END
from pan.ordering.units import PS_PER_MS
from pan.util.ratelimit import RateLimitedLog
from pan.wire.int_csv import IntCsvLayout, RowBlock, parse_block

log = logging.getLogger(__name__)

MAX_LINE_BYTES = 64 * 1024  # longer lines are skipped while reading, before any parsing (``oversized``)
READ_CHUNK = 256 * 1024
#: Below this many lines a read is cheaper line by line than as a numpy block (`pan bench ingest`, read sizes,
#: 2026-11-28: 10 rows cost 9.7 us/row as a block and 4.3 line by line, 30 rows 6.6 and 6.3, 63 rows 3.2 and
#: 4.2); a 200 Hz source on its own connection in an unpaced replay writes 40 rows at a time (a 200 ms slice).
BLOCK_MIN_LINES = 32

#: A promise of this ts ends a stream: nothing more will come (``pan simulate`` sends it when a source's data
#: is exhausted). Closing a connection does not end its streams.
END_OF_STREAM = TS_LIMIT
assert END_OF_STREAM == ORDERING_END
#: The key of a promise line, ``{"stream": S, "ts": T, "promise": true}``: no row of S older than T
#: follows. It carries no data; a sender uses it for a source that is quiet or has no data at all.
PROMISE = "promise"

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
#: If the idle check itself runs this much later than planned, this process was not running (stopped,
#: starved): it did not see the silence, so every stream's idle timer starts again.
IDLE_CHECK_STALL_S = 0.5

#: The forwarder's params that set up its door: how non-JSON lines are read (``decoder``) and the limits.
INGEST_PARAMS = (
    "decoder", "max_row_bytes", "promise_ahead_ms", "idle_timeout_s", "max_connections_per_address", "schemas",
    "idle_after_ms", "parse_blocks",
)

# Reasons, beyond pan.ingest.schema's, in the ``rejected`` and ``promises_refused`` counters.
ROW_TOO_LARGE = "row_too_large"
NOT_SENDER = "not_sender"  # a promise for a stream whose data another connection carries
TOO_FAR_AHEAD = "too_far_ahead"  # a promise beyond the connection's newest ts + promise_ahead_ms


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

def _bump(counts: dict[str, int], key: str) -> None:
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
        _bump(self.counters.rejected, reason)
        self.problems.warning("ingest: row for %r refused (%s): %r", stream[:100], reason, line[:200])


@dataclass(eq=False)
class Connection:
    """One sender: while it is open, only it may promise for the streams it carries data for."""

    address: str
    open: bool = True


@dataclass(eq=False, slots=True)
class StreamState:
    """What the server knows of one input stream, over all connections."""

    newest: int | None = None  # ts of the last row (senders send in ts order)
    promised: int | None = None  # newest promise made for it (by its sender or by this server), below the end
    ended: bool = False
    heard: float = 0.0  # monotonic time of its last row or accepted promise
    idle: bool = False
    carrier: Connection | None = None  # the connection that last sent rows of it

    @property
    def progress(self) -> int | None:
        if self.promised is None or (self.newest is not None and self.newest > self.promised):
            return self.newest
        return self.promised


class IngestServer:
    """TCP listener that hands each received chunk's valid rows to ``deliver``, promises to ``on_promise``.

    Closing a connection ends nothing. With ``on_promise``, streams silent for
    ``idle_after_ms`` while others go on are declared idle and promised for.
    """

    def __init__(
        self,
        host: str,
        port: int,
        expected: set[str],
        deliver: Deliver,
        on_promise: OnPromise | None = None,
        settings: IngestSettings | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.settings = settings or IngestSettings()
        self.counters = IngestCounters()
        self.problems = RateLimitedLog(log)
        self.parser = LineParser(expected, self.counters, self.settings, self.problems)
        self._deliver = deliver
        self._on_promise = on_promise
        self._promise_ahead = self.settings.promise_ahead_ms * PS_PER_MS
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[Any]] = set()
        self._per_address: dict[str, int] = {}
        now = time.monotonic()
        self.streams: dict[str, StreamState] = {name: StreamState(heard=now) for name in sorted(expected)}
        self._frontier: int | None = None  # the newest row ts over all streams
        self._idle_after_s = self.settings.idle_after_ms / 1000
        self._all_quiet = True  # no stream heard within idle_after_ms: the next row restarts every timer
        self._idle_task: asyncio.Task[None] | None = None
        decoder = self.parser.decoder
        #: The integer CSV layout whose lines are parsed a block at a time, or None: line by line.
        self.block_layout: IntCsvLayout | None = (
            decoder.int_csv if decoder is not None and self.settings.parse_blocks else None
        )

    def row_format(self, stream: str) -> RowFormat:
        """How the rows delivered for ``stream`` are read and stored (``LineParser.row_format``)."""
        return self.parser.row_format(stream)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.port, reuse_address=True)
        if self.port == 0:
            self.port = self._server.sockets[0].getsockname()[1]
        if self._idle_after_s > 0 and self._on_promise is not None:
            self._idle_task = asyncio.create_task(self._watch_idle(), name="ingest idle streams")

    async def stop(self) -> None:
        if self._idle_task is not None:
            self._idle_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._idle_task
            self._idle_task = None
        if self._server is not None:
            self._server.close()
            for task in list(self._connections):
                task.cancel()
            for task in list(self._connections):
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        if self._per_address.get(address, 0) >= self.settings.max_connections_per_address:
            self.counters.refused_connections += 1
            self.problems.warning(
                "ingest: connection from %s refused: it already holds %d (max_connections_per_address)",
                address, self.settings.max_connections_per_address,
            )
            writer.transport.abort()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self._per_address[address] = self._per_address.get(address, 0) + 1
        self.counters.connections += 1
        self.counters.open_connections += 1
        conn = Connection(address)
        try:
            await self._consume(reader, conn)
        except (ConnectionError, OSError) as exc:
            log.info("ingest: connection ended: %s", exc)
        finally:
            conn.open = False  # its streams stay open: a reconnect resumes them
            self._connections.discard(task)
            self.counters.open_connections -= 1
            left = self._per_address.pop(address) - 1
            if left:
                self._per_address[address] = left
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _consume(self, reader: asyncio.StreamReader, conn: Connection) -> None:
        """Read lines until EOF or an idle timeout; neither ends the streams this connection carried."""
        pending = b""
        skipping = False  # inside an oversized line: drop bytes up to the next newline
        while True:
            try:
                async with asyncio.timeout(self.settings.idle_timeout_s):
                    chunk = await reader.read(READ_CHUNK)
            except TimeoutError:
                # After a stall of this process (stopped, starved, a long step of a component) the deadline and
                # bytes that came meanwhile are due in the same loop round, and the timer wins: those bytes are
                # in the reader already. They are read, not closed away with the connection as if it were idle.
                chunk = await read_at_once(reader)
                if not chunk and not reader.at_eof():
                    self.counters.idle_timeouts += 1
                    if pending and not skipping:
                        self.counters.truncated += 1
                    self.problems.warning(
                        "ingest: connection from %s closed after %.0f s without data; its streams stay open",
                        conn.address, self.settings.idle_timeout_s,
                    )
                    return
            if not chunk:
                if pending and not skipping:
                    self.counters.truncated += 1
                    self.problems.warning("ingest: connection closed mid-line: %r", pending[:200])
                return
            data = pending + chunk
            if skipping:
                newline = data.find(b"\n")
                if newline < 0:
                    pending = b""
                    continue
                data, skipping = data[newline + 1 :], False
            if self.block_layout is None:
                lines = data.split(b"\n")
                pending = lines.pop()
            else:
                cut = data.rfind(b"\n") + 1
                complete, pending = data[:cut], data[cut:]
            if len(pending) > MAX_LINE_BYTES:
                self.counters.oversized += 1
                self.problems.warning("ingest: line longer than %d bytes skipped: %r", MAX_LINE_BYTES, pending[:200])
                pending, skipping = b"", True
            if self.block_layout is None:
                self._deliver_lines(lines, conn)
            elif complete.count(b"\n") >= self.settings.block_min_lines:
                self._deliver_block(complete, conn)
            elif complete:
                self._deliver_lines(complete.split(b"\n")[:-1], conn)

    def _parse_numbered(self, numbered: Iterable[tuple[int, bytes]]) -> Iterator[tuple[int, str, Row | Promise]]:
        """Each non-blank line through the per-line parser, which counts what it refuses: (line number,
        stream, row or promise) for the rest."""
        parse = self.parser.parse
        for number, line in numbered:
            line = line.rstrip(b"\r")
            if not line:
                continue
            parsed = parse(line)
            if parsed is not None:
                yield number, *parsed

    def _deliver_lines(self, lines: list[bytes], conn: Connection | None = None) -> None:
        """Data first, then promises: a promise in the same chunk as rows is checked against them."""
        batches: dict[str, list[Row]] = {}
        promises: list[tuple[str, object]] = []
        for _, stream, row in self._parse_numbered(enumerate(lines)):
            if type(row) is Promise:
                promises.append((stream, row.ts))
            else:
                rows = batches.get(stream)
                if rows is None:
                    batches[stream] = [row]
                else:
                    rows.append(row)
        self._accept(batches, promises, conn or Connection("local"))

    def _deliver_block(self, data: bytes, conn: Connection | None = None) -> None:
        """``data``'s lines (each ending in a newline) as ``_deliver_lines`` would deliver them, parsed as a block.

        The lines the block parser takes are grouped by stream with numpy; the
        others go through ``LineParser.parse`` one by one. A stream that gets
        rows from both in one block has them merged back into arrival order.
        """
        layout, decoder = self.block_layout, self.parser.decoder
        assert layout is not None and decoder is not None
        block = parse_block(data, layout, self.settings.max_row_bytes)
        keys, order = np.unique(block.values[:, layout.key_column], return_inverse=True)
        names = [decoder.stream_of_key(key) for key in keys.tolist()]
        expected = self.parser.expected
        known = [name in expected for name in names]
        if not all(known):  # left to the per-line path, which counts them as unexpected
            keep = np.array(known)[order]
            block.taken, block.values = block.taken[keep], block.values[keep]
            block.starts, block.ends = block.starts[keep], block.ends[keep]
            order = order[keep]
        # Per stream: its rows' positions in the block, in arrival order; streams by their first row.
        by_stream = np.argsort(order, kind="stable")
        bounds = np.cumsum(np.bincount(order, minlength=len(names)))
        per_stream = np.split(by_stream, bounds[:-1]) if names else []
        first_line: dict[str, int] = {}
        taken_rows: dict[str, np.ndarray] = {}
        for name, picks, is_known in zip(names, per_stream, known, strict=True):
            if is_known and len(picks):
                taken_rows[name] = picks
                first_line[name] = int(block.taken[picks[0]])
        late, promises = self._parse_left_over(data, block.taken)
        for stream, rows in late.items():
            first_line[stream] = min(rows[0][0], first_line.get(stream, rows[0][0]))
        batches: dict[str, Sequence[Row]] = {}
        for stream in sorted(first_line, key=first_line.__getitem__):
            picks = taken_rows.get(stream)
            others = late.get(stream)
            if others is None:
                batches[stream] = RowBlock(block, picks, layout)
            elif picks is None:
                batches[stream] = [row for _, row in others]
            else:
                mine = zip(block.taken[picks].tolist(), block.values[picks].tolist(), strict=True)
                batches[stream] = [row for _, row in sorted([*mine, *others], key=lambda pair: pair[0])]
        self._accept(batches, promises, conn or Connection("local"))

    def _parse_left_over(
        self, data: bytes, taken: np.ndarray
    ) -> tuple[dict[str, list[tuple[int, Row]]], list[tuple[str, object]]]:
        """The lines of ``data`` the block parser did not take, through the per-line path, in arrival order.

        Returns each stream's rows with their line numbers, and the promises.
        """
        rows: dict[str, list[tuple[int, Row]]] = {}
        promises: list[tuple[str, object]] = []
        lines_in_block = data.count(b"\n")
        if len(taken) == lines_in_block:
            return rows, promises
        lines = data.split(b"\n")
        is_taken = np.zeros(lines_in_block, dtype=bool)
        is_taken[taken] = True
        left_over = ((number, lines[number]) for number in np.flatnonzero(~is_taken).tolist())
        for number, stream, row in self._parse_numbered(left_over):
            if type(row) is Promise:
                promises.append((stream, row.ts))
            else:
                rows.setdefault(stream, []).append((number, row))
        return rows, promises

    def _accept(
        self, batches: dict[str, Sequence[Row]], promises: list[tuple[str, object]], conn: Connection
    ) -> None:
        """Count and deliver a chunk's rows, then take its promises (checked against those rows)."""
        if batches:
            per_stream, states, now = self.counters.per_stream, self.streams, time.monotonic()
            if self._all_quiet:
                self._restart_idle_timers(now)
            for stream, rows in batches.items():
                row_ts = self.parser.row_format(stream).row_ts
                newest = row_ts(rows[-1])
                state = states.get(stream) or self._state(stream)
                promised = state.promised
                if promised is not None and (state.newest is None or state.newest < promised):
                    if type(rows) is RowBlock:
                        behind = int((rows.ts < promised).sum())
                    else:
                        behind = sum(1 for row in rows if row_ts(row) < promised)
                    if behind:
                        self.counters.behind_promise += behind
                        self.problems.warning(
                            "ingest: %d rows of %s older than its promise %d (late downstream)",
                            behind, stream, promised,
                        )
                state.newest, state.carrier, state.heard, state.idle, state.ended = newest, conn, now, False, False
                if self._frontier is None or newest > self._frontier:
                    self._frontier = newest
                per_stream[stream] = per_stream.get(stream, 0) + len(rows)
                self.counters.rows += len(rows)
            self._deliver(batches)
        if promises:
            accepted = self._accept_promises(promises, conn)
            if accepted and self._on_promise is not None:
                self._on_promise(accepted)

    def _accept_promises(self, promises: list[tuple[str, object]], conn: Connection) -> dict[str, int]:
        """The newest accepted promise per stream; each refused one is counted and logged."""
        accepted: dict[str, int] = {}
        now = time.monotonic()
        if self._all_quiet:
            self._restart_idle_timers(now)
        for stream, ts in promises:
            reason = self._promise_problem(stream, ts, conn)
            if reason is None:
                assert type(ts) is int
                self.counters.promises += 1
                state = self._state(stream)
                state.heard, state.idle = now, False
                if ts >= END_OF_STREAM:
                    state.ended = True
                elif state.promised is None or ts > state.promised:
                    state.promised = ts
                accepted[stream] = max(ts, accepted.get(stream, ts))
            else:
                _bump(self.counters.promises_refused, reason)
                self.problems.warning(
                    "ingest: promise for %r refused (%s): ts %r from %s", stream[:100], reason, ts, conn.address
                )
        return accepted

    def _promise_problem(self, stream: str, ts: object, conn: Connection) -> str | None:
        """Why a promise of ``ts`` for ``stream`` from ``conn`` is refused, or None.

        While a connection carries a stream's data (it sent its last rows and is
        still open), nobody else may promise for it. Once it closed, any
        connection may (a source that reconnects, or says "no more rows"). A
        promise may run ahead of the newest row, of the stream or of any stream
        of this server (a source silent for a while), by ``promise_ahead_ms``;
        the end of a stream may always be promised. A server that has no row yet
        takes any promise (a sender's "this source has no rows").
        """
        problem = check_value(ts, INT)
        if problem is not None:
            return problem
        if not 0 <= ts <= END_OF_STREAM:  # type: ignore[operator]
            return TS_OUT_OF_RANGE
        state = self._state(stream)
        carrier = state.carrier
        if carrier is not None and carrier is not conn and carrier.open:
            return NOT_SENDER
        if ts == END_OF_STREAM or self._frontier is None:
            return None
        reference = self._frontier if state.newest is None else max(state.newest, self._frontier)
        return None if ts <= reference + self._promise_ahead else TOO_FAR_AHEAD  # type: ignore[operator]

    # --- idleness at the edge ---------------------------------------------------------

    def _state(self, stream: str) -> StreamState:
        """A stream's state, made on first use (a server may admit streams it was not told of)."""
        state = self.streams.get(stream)
        if state is None:
            state = self.streams[stream] = StreamState(heard=time.monotonic())
        return state

    def _restart_idle_timers(self, now: float) -> None:
        """Every stream gets a fresh ``idle_after_ms``: after a pause of everyone, or a stall of this process."""
        for state in self.streams.values():
            state.heard = max(state.heard, now)
        self._all_quiet = False

    async def _watch_idle(self) -> None:
        period = min(self._idle_after_s / 4, 0.25)
        last = time.monotonic()
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            if now - last > period + IDLE_CHECK_STALL_S:
                self._restart_idle_timers(now)  # this process was not running: it saw no silence
            else:
                self.check_idle(now)
            last = now

    def check_idle(self, now: float) -> dict[str, int]:
        """Declare streams silent for ``idle_after_ms`` idle and promise for them; returns the promises made.

        The promise is the smallest progress (newest row or promise) of the
        streams still active, so an idle stream holds nobody back and takes
        nobody's rows over; with no active stream nothing is promised (a pause
        of everyone, e.g. a half-time break, is not idleness). Ended streams
        are neither.
        """
        limit = now - self._idle_after_s
        active: list[int | None] = []
        idle: list[tuple[str, StreamState]] = []
        for name, state in self.streams.items():
            if state.ended:
                continue
            if state.heard > limit:
                active.append(state.progress)
            else:
                idle.append((name, state))
                if not state.idle:
                    state.idle = True
                    self.counters.idle_declared += 1
                    log.info("ingest: %s silent for %.1f s: idle", name, self._idle_after_s)
        if not active:
            self._all_quiet = True
            return {}
        progress = [p for p in active if p is not None]
        if len(progress) < len(active) or not idle:
            return {}  # an active stream of unknown progress: nothing can be promised yet
        promise = min(progress)
        made: dict[str, int] = {}
        for name, state in idle:
            current = state.progress
            if current is None or promise > current:
                state.promised = promise
                made[name] = promise
        if made:
            self.counters.idle_promises += len(made)
            assert self._on_promise is not None
            self._on_promise(made)
        return made


async def read_at_once(reader: asyncio.StreamReader) -> bytes:
    """What ``reader`` holds already, without waiting for more (b"" if nothing)."""
    try:
        async with asyncio.timeout(0):
            return await reader.read(READ_CHUNK)
    except TimeoutError:
        return b""


async def send_lines(host: str, port: int, lines: list[bytes], *, timeout_s: float = 10.0) -> None:
    """Write newline-terminated lines to an ingest port (demo and test helper)."""
    async with asyncio.timeout(timeout_s):
        _reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(b"".join(line if line.endswith(b"\n") else line + b"\n" for line in lines))
        async with asyncio.timeout(timeout_s):
            await writer.drain()
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
