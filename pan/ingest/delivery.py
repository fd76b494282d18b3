"""How the complete lines of one read reach ``deliver``: line by line, or parsed together as a numpy block.

``ReadDelivery`` is a base of ``IngestServer`` (pan/ingest/server.py), apart from its sockets: tests and
``pan bench ingest`` hand reads to it directly. Both paths deliver the same rows in arrival order and
count the same refusals; a read's promises are taken after its rows (pan/ingest/promises.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from pan.ingest.lines import Deliver, LineParser, Promise, Row
from pan.ingest.promises import PromiseChecks
from pan.ingest.settings import IngestSettings
from pan.ingest.streams import Connection
from pan.wire.int_csv import IntCsvLayout, RowBlock, parse_block


class ReadDelivery(PromiseChecks):
    """A read's lines parsed, counted per stream and delivered; then its promises."""

    # Set by ``IngestServer.__init__``.
    settings: IngestSettings
    parser: LineParser
    block_layout: IntCsvLayout | None
    _deliver: Deliver

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
