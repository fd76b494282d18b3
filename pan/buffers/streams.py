"""Output streams of a worker, each backed by a ring buffer (its inputs are in pan/input/channel.py).

Output tuples are encoded to JSON once, when appended, so that serving them
to any number of subscribers is a byte join rather than re-encoding (pan/buffers/tuples.py). Publishing the
stream's progress is in pan/buffers/watermarks.py, replays and retraction in pan/buffers/retraction.py.
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections import deque
from itertools import accumulate, count, repeat
from typing import Any

import orjson

from pan.buffers.retraction import Retraction
from pan.buffers.ringbuffer import RingBuffer
from pan.buffers.tuples import Tuple, encode_at
from pan.buffers.watermarks import Watermarks
from pan.wire import line_pages
from pan.wire.progress import EMPTY, StreamProgress

DEFAULT_BUFFER_SIZE = 10_000
#: Bytes of encoded tuples an output stream holds at most (the workflow key ``buffer_bytes``), next to its
#: tuple count: a stream of large tuples drops its oldest ones early rather than grow the process without
#: bound. 128 MiB is well above 400,000 rows of ~140 bytes, the largest buffer the shipped
#: workflows use, so it only bites on unusually large tuples.
DEFAULT_BUFFER_BYTES = 128 * 1024 * 1024
_SIZES_COMPACT = 4096  # drop the forgotten head of the size table once it is this long and half the table


#: Bytes of tuples in one `/data` answer at most (beyond one tuple).
PAGE_BYTES = 1 << 20

#: A lossless reader (``/data?hold=NAME``) that has not asked for this long is forgotten (s); above the
#: longest long poll, so only a reader that went away expires.
HOLD_EXPIRY_S = 120.0


def _within_page_bytes(items: list[bytes]) -> list[bytes]:
    """The oldest items of a page that fit ``PAGE_BYTES`` (at least one): the reader asks again for the rest.

    Keeps every answer, and the client's decoding of it, small whatever the tuple size: a page of 10,000
    64x100 heat maps would be 250 MB of JSON.
    """
    sizes = list(map(len, items))
    if sum(sizes) <= PAGE_BYTES:  # the usual case, in C loops
        return items
    return items[: max(1, bisect_right(list(accumulate(sizes)), PAGE_BYTES))]


class OutputStream(Watermarks, Retraction):
    """A stream this worker publishes; indices are assigned here unless repeated."""

    def __init__(
        self,
        name: str,
        capacity: int = DEFAULT_BUFFER_SIZE,
        progress: StreamProgress = EMPTY,
        byte_budget: int = DEFAULT_BUFFER_BYTES,
    ):
        self.name = name
        self.buffer: RingBuffer[bytes] = RingBuffer(capacity)
        self.base_capacity = capacity
        #: Readers that asked for every tuple (``/data?hold=NAME``): name -> (the index they have read up to,
        #: monotonic time of their latest request). While one lags, the ring grows instead of overwriting.
        self._holders: dict[str, tuple[int, float]] = {}
        self.grown_for_holders = 0
        self.byte_budget = byte_budget
        self.held_bytes = 0  # encoded bytes of the tuples the buffer holds
        self.dropped_for_bytes = 0  # tuples dropped early to stay within byte_budget
        # Encoded size per index from the buffer's oldest held index on (0 for a hole): the head of
        # this table is forgotten as the ring overwrites or the budget drops tuples.
        self._sizes: list[int] = []
        self._sizes_start = 0
        self.progress = progress  # what every /data answer says in ``meta``
        self._progress_json: bytes | None = None  # its encoding, made when a page needs it
        self.appended = 0
        self.retractions = 0  # rewinds (``rewind``): the generation of the latest retract notice
        self.retracted_tuples = 0
        self._rewinds: list[tuple[int, int]] = []  # (generation, after) of the latest MAX_REWINDS rewinds
        #: Speculative producers only: the newest index no retraction can touch (``settle``); the default
        #: (settled) view of /data serves tuples up to it, the raw view everything. None: every tuple is final.
        self.settled: int | None = None
        #: During a replay (``replay_from``): the index the component's next tuple gets. Tuples it re-emits
        #: byte for byte equal to those held keep their place; the first that differs withdraws the rest.
        self._replay_next: int | None = None
        self.replayed_same = 0  # tuples a replay emitted again unchanged (no retraction needed for them)
        #: ``unsettled_min_ts``: (index, ts) of the unsettled tuples that can still be the smallest ts (a sliding
        #: window minimum: ts rises along it), and the newest index looked at.
        self._pending: deque[tuple[int, int]] = deque()
        self._pending_scanned = -1
        self.served_tuples = 0
        self.requests = 0
        self._name_json = orjson.dumps(name)
        self._wm_poked_at = 0.0
        self._appended_seen = 0
        self._data_at = 0.0

    @property
    def next_index(self) -> int:
        """The index the next tuple gets (during a replay: the replay's position, not the end of the buffer)."""
        return self.buffer.next_index if self._replay_next is None else self._replay_next

    def append(self, item: Tuple, index: int | None = None) -> int:
        """Assign (or keep, for repeaters) the index and store the encoded tuple."""
        replaying = index is None and self._replay_next is not None
        if index is None:
            index = self.next_index
        encoded = encode_at(index, item)
        if replaying and not self._replayed([encoded]):
            return index
        skipped = index - self.buffer.next_index
        if self._holders and skipped == 0:  # a repeater's gap is not ours to hold
            self._make_room(1)
        self.buffer.append(encoded, index)
        self.appended += 1
        self._account([len(encoded)], skipped)
        return index

    def extend(self, items: list[Tuple]) -> None:
        self.extend_encoded(list(map(encode_at, count(self.next_index), items)))

    def extend_encoded(self, encoded: list[bytes]) -> None:
        """Append JSON objects the caller encoded with indices from ``next_index`` on."""
        if self._replay_next is not None:
            encoded = self._replayed(encoded)
            if not encoded:
                return
        if self._holders:
            self._make_room(len(encoded))
        self.buffer.extend(encoded)
        self.appended += len(encoded)
        self._account(list(map(len, encoded)))

    # --- byte budget ------------------------------------------------------------------

    def _account(self, sizes: list[int], skipped: int = 0) -> None:
        """Count the items just stored (after ``skipped`` holes), then keep within the byte budget."""
        table = self._sizes
        if skipped > 0:
            table.extend(repeat(0, min(skipped, self.buffer.capacity)))
        table.extend(sizes)
        self.held_bytes += sum(sizes)
        overwritten = len(table) - self._sizes_start - len(self.buffer)
        if overwritten > 0:
            self._forget(overwritten)
        if self.held_bytes > self.byte_budget:
            self._drop_for_budget()

    def _forget(self, count: int) -> None:
        """The oldest ``count`` indices are no longer held."""
        start, end = self._sizes_start, self._sizes_start + count
        self.held_bytes -= sum(self._sizes[start:end])
        if end >= _SIZES_COMPACT and 2 * end >= len(self._sizes):
            del self._sizes[:end]
            end = 0
        self._sizes_start = end

    def _drop_for_budget(self) -> None:
        """Drop the oldest tuples until the rest fit the budget; the newest, and what a holder has not
        read, are always kept."""
        table, budget = self._sizes, self.byte_budget
        position, last, held, dropped = self._sizes_start, len(table) - 1, self.held_bytes, 0
        unread = self._unread_from()
        if unread is not None:
            last = min(last, position + max(0, unread - (self.buffer.next_index - len(self.buffer))))
        while held > budget and position < last:
            size = table[position]
            held -= size
            dropped += size > 0
            position += 1
        first = self.buffer.next_index - len(self.buffer)
        self.buffer.drop_before(first + position - self._sizes_start)
        self.dropped_for_bytes += dropped
        self._forget(position - self._sizes_start)

    # --- lossless readers ----------------------------------------------------------

    def hold(self, reader: str, after: int) -> None:
        """``reader`` has every tuple up to ``after`` and wants none after it overwritten.

        For readers that must not lose anything (``pan replay`` recording), not
        for live clients: while such a reader lags, the ring grows (the byte
        budget does not drop its unread tuples either) and shrinks back to
        ``buffer_size`` once it has caught up. A reader silent for
        ``HOLD_EXPIRY_S`` is forgotten.
        """
        self._holders[reader] = (after, time.monotonic())
        if self.buffer.capacity > self.base_capacity:
            self._trim()

    def unread_from(self) -> int | None:
        """The oldest index a lossless reader (a holder) has not read yet; None without holders."""
        return self._unread_from()

    def _unread_from(self) -> int | None:
        """The oldest index a live holder has not read yet, or None without holders."""
        if not self._holders:
            return None
        now = time.monotonic()
        for reader in [r for r, (_, seen) in self._holders.items() if now - seen > HOLD_EXPIRY_S]:
            del self._holders[reader]
        return min(after for after, _ in self._holders.values()) + 1 if self._holders else None

    def holders_behind(self) -> int:
        """Tuples the slowest live holder has not read yet (0 without holders): what a replay's feed watches."""
        unread = self._unread_from()
        return 0 if unread is None else max(0, self.buffer.next_index - unread)

    def _make_room(self, count: int) -> None:
        """Grow the ring so that appending ``count`` tuples overwrites nothing a holder has not read."""
        if len(self.buffer) + count <= self.buffer.capacity:
            return  # it overwrites nothing at all (checked first: this runs for every tuple appended)
        unread = self._unread_from()
        if unread is None:
            return
        oldest_kept = max(unread, self.buffer.next_index - len(self.buffer))
        needed = self.buffer.next_index + count - oldest_kept
        if needed > self.buffer.capacity:
            self.buffer.resize(max(needed, 2 * self.buffer.capacity))
            self.grown_for_holders += 1

    def _trim(self) -> None:
        """After a holder read on: free what everyone has read beyond ``buffer_size``, then shrink."""
        unread = self._unread_from()
        start, end = self.buffer.next_index - len(self.buffer), self.buffer.next_index
        keep_from = min(end - self.base_capacity, end if unread is None else unread)
        if keep_from > start:
            self.buffer.drop_before(keep_from)
            self._forget(self.buffer.next_index - len(self.buffer) - start)
        if len(self.buffer) <= self.base_capacity:
            self.buffer.resize(self.base_capacity)

    def reset(self, progress: StreamProgress, start_index: int = 0) -> None:
        """Start over, e.g. because the original producer restarted (indices from 0), or go on from a checkpoint
        (``start_index``: the next tuple's index, under the checkpoint's epoch in ``progress``)."""
        self.buffer.reset(start_index)
        self.resumed = start_index if start_index else None
        self._forget_pending()
        self._sizes.clear()
        self._sizes_start = self.held_bytes = 0  # (a position in the size table, not an index)
        self._set_progress(progress)

    def render(self, after: int, *, oldest: int | None, latest: int | None, raw_generation: int | None = None,
               lines: bool = False) -> bytes:
        """The `/data` answer body, built from pre-encoded tuples (``lines``: as a line page, pan/wire/line_pages.py).

        ``raw_generation`` None: the settled view (of a speculative producer only what no retraction can
        touch); an int: the raw view for a reader that has seen that retract generation.
        """
        page = self.buffer.read(after, oldest=oldest, latest=latest)
        items, indices = page.items, page.indices
        last = page.last
        meta = self._meta_json()
        if self.settled is not None and raw_generation is None and indices and indices[-1] > self.settled:
            keep = bisect_right(indices, self.settled)
            items, last = items[:keep], self.settled
        elif raw_generation is not None:
            notice = self.retract_notice(raw_generation)
            extra: dict[str, Any] = {}
            if self.settled is not None:  # a raw reader must know which of the tuples are final
                extra["settled"] = self.settled
            if notice is not None:
                extra["retract"] = notice
            if extra:
                meta = orjson.dumps({**self.progress.to_json(), **extra})
        if latest is None:
            items = _within_page_bytes(items)
        self.requests += 1
        self.served_tuples += len(items)
        fields = b'"first":%d,"last":%d,"missed":%d,"meta":' % (page.first, last, page.missed)
        if lines:
            return line_pages.render(b'"stream":' + self._name_json + b"," + fields + meta, items,
                                     indices[: len(items)])
        return b"".join((b'{"status":"ok","stream":', self._name_json, b',"tuples":[', b",".join(items), b"],",
                         fields, meta, b"}"))

    def counters(self) -> dict[str, Any]:
        return {
            "first": self.buffer.first,
            "last": self.buffer.last,
            "held": len(self.buffer),
            "capacity": self.buffer.capacity,
            "buffer_size": self.base_capacity,
            "holders_behind": self.holders_behind(),
            "held_bytes": self.held_bytes,
            "byte_budget": self.byte_budget,
            "dropped_for_bytes": self.dropped_for_bytes,
            "holders": len(self._holders),
            "grown_for_holders": self.grown_for_holders,
            "appended": self.appended,
            "retractions": self.retractions,
            "retracted_tuples": self.retracted_tuples,
            "replayed_same": self.replayed_same,
            "settled": self.settled,
            "requests": self.requests,
            "served_tuples": self.served_tuples,
            "meta": self.progress.to_json(),
        }
