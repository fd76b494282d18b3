"""Inter-PAN ingest: newline-delimited rows over plain TCP, checked at the door.

A line that starts with ``{`` is a JSON object with at least ``stream`` and
``ts`` (with ``"promise": true`` it is a promise, not data: see ``pan.ingest.lines.PROMISE``);
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

This module holds the sockets. The rest has a module each: the settings
(pan/ingest/settings.py), the counters (pan/ingest/counters.py), line parsing
(pan/ingest/lines.py), stream states (pan/ingest/streams.py), idleness
(pan/ingest/idleness.py), promise checks (pan/ingest/promises.py) and the
delivery of a read's lines (pan/ingest/delivery.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from pan.ingest.counters import IngestCounters
from pan.ingest.decoders import RowFormat
from pan.ingest.delivery import ReadDelivery
from pan.ingest.lines import Deliver, LineParser, OnPromise
from pan.ingest.settings import MAX_LINE_BYTES, IngestSettings
from pan.ingest.streams import Connection, StreamState
from pan.ordering.picoseconds import PS_PER_MS
from pan.util.ratelimit import RateLimitedLog
from pan.wire.int_csv import IntCsvLayout

log = logging.getLogger(__name__)

READ_CHUNK = 256 * 1024


class IngestServer(ReadDelivery):
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
