"""One input of a worker: the pull task, its buffer, the upstream progress and back-pressure.

The split follows Kafka's consumer (a fetcher that talks to brokers, apart from the
subscription state that readers consume) and Flink's input channels (which hold the
upstream watermark next to the buffered records):

* ``InputChannel`` owns the ring buffer the pull fills, the producer's progress of the
  latest fetch, the counters, and ``pull(subscriber)``: the task that fetches through a
  ``StreamSubscriber`` whenever the buffer has room. The channel holds that subscriber's
  ``SubscriptionState`` (``pan/input/subscription.py``: fetch position, epoch, failover between
  publishers) and reads where the pull stands from it;
* a ``Cursor`` is one reader's position in the buffer. While a cursor exists, the pull
  never overwrites what it has not read: a slow component delays its input instead of
  losing it. ``read`` starts over by itself when the producer restarted.

Tuples keep the original producer's indices.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pan.buffers.ringbuffer import RingBuffer
from pan.input.subscription import progress_retract
from pan.wire.progress import EMPTY, StreamProgress

if TYPE_CHECKING:
    from pan.buffers.row_store import RowStore
    from pan.input.subscriber import StreamSubscriber
    from pan.input.subscription import SubscriptionState

Tuple = dict[str, Any]


@dataclass(slots=True)
class InputCounters:
    received: int = 0
    missed: int = 0
    resets: int = 0
    failovers: int = 0
    decode_errors: int = 0  # upstream pages that could not be decoded (the pull failed over)
    bad_sources: int = 0  # repository answers naming an unusable publisher address
    waits_for_reader: int = 0  # times the pull task held off because the reader had not made room


@dataclass(slots=True)
class Batch:
    """What one ``Cursor.read`` took: tuples in index order after index ``after``."""

    after: int  # the cursor's position before this read (-1 after a restart)
    indices: list[int]
    items: list[Tuple]
    missed: int  # indices overwritten before the reader came to them
    restarted: bool = False  # the producer restarted since the last read: the buffer started over
    #: Raw view of a speculative producer: the tuples after this index that this reader took before were
    #: withdrawn (``InputChannel.retract``); ``items`` are what came in their place.
    retracted: int | None = None


class InputChannel:
    """A stream this worker pulls, buffered for its component."""

    def __init__(self, name: str, buffer: RingBuffer[Tuple]) -> None:
        self.name = name
        self.buffer = buffer
        self.progress: StreamProgress = EMPTY  # the producer's progress at the latest fetch
        self.generation = 0  # bumped on every reset (the producer restarted)
        #: Called after new tuples, a reset or news in the progress, so a component can wait on several inputs.
        self.listeners: list[Callable[[], None]] = []
        self.subscriber: StreamSubscriber | None = None  # while ``pull`` runs
        self.subscription: SubscriptionState | None = None  # where that pull stands: position, epoch, source
        self.retractions = 0  # raw view: retract notices that withdrew tuples this channel held
        self.retract_generation = 0  # the producer's generation of the latest of them
        #: Set by a component that computes on columns: the pull then asks for Arrow pages and keeps their rows
        #: in this store, and the buffer holds their row ids (pan/buffers/row_store.py).
        self.row_store: RowStore | None = None
        self._received = 0
        self._resets = 0
        self._waits_for_reader = 0
        self._cursors: list[Cursor] = []
        self._room = asyncio.Event()

    # --- the pull task --------------------------------------------------------------

    async def pull(self, subscriber: StreamSubscriber, page: int) -> None:
        """Fill the buffer through ``subscriber`` forever, ``page`` tuples at most per fetch."""
        self.subscriber, self.subscription = subscriber, subscriber.state
        while True:
            await self.wait_for_room(page)  # a slow component holds the pull; nothing is overwritten
            fetch = await subscriber.fetch()
            if fetch.retract is not None:
                self.retract(*fetch.retract)
            self.set_progress(fetch.progress)
            if fetch.reset:
                self.reset()
            if self.row_store is not None and not isinstance(fetch.tuples, list):  # a column page's record batch
                self.add(self.row_store.add(fetch.tuples), fetch.indices)
            elif fetch.tuples:
                self.add(fetch.tuples)

    @property
    def upstream_last(self) -> int:
        """The publisher's newest index at the last fetch."""
        return -1 if self.subscription is None else self.subscription.upstream_last

    @property
    def behind(self) -> bool:
        """The publisher holds tuples this worker has not received yet."""
        return self.upstream_last > self.buffer.last

    @property
    def source(self) -> dict[str, Any] | None:
        """The publisher pulled from now (None while looking for one)."""
        subscriber, subscription = self.subscriber, self.subscription
        if subscriber is None or subscription is None or subscription.source is None:
            return None
        source = subscription.source
        return {"host": source.host, "port": source.port, "rep": source.rep, "lvl": source.lvl,
                "local": subscriber.fetcher.is_local(source)}

    @property
    def counters(self) -> InputCounters:
        """What happened to this input so far (the pull's failovers and losses included)."""
        counters = InputCounters(self._received, resets=self._resets, waits_for_reader=self._waits_for_reader)
        if self.subscription is not None:
            stats = self.subscription.stats
            counters.missed, counters.failovers = stats.missed, stats.failovers
            counters.decode_errors, counters.bad_sources = stats.decode_errors, stats.bad_sources
        return counters

    # --- what the pull brings (also for offline use: tests, benchmarks) -------------

    @property
    def upstream_settled(self) -> int | None:
        """Raw view of a speculative producer: its newest final index at the latest fetch (None: all are final)."""
        return settled_of(self.progress)

    def set_progress(self, progress: StreamProgress) -> None:
        """The upstream progress of the latest fetch; a grown K, moved watermark or settled prefix wakes readers."""
        grew = progress.k_grew_from(self.progress)
        moved = progress.wm_moved_from(self.progress) or settled_of(progress) != settled_of(self.progress)
        self.progress = progress
        notice = progress_retract(progress.to_json()) if progress.other else None
        if notice is not None and notice[1] > self.retract_generation:  # also those that withdrew nothing here
            self.retract_generation = notice[1]
            moved = True
        if grew or moved:
            self.buffer.poke()  # a repeater waiting on this buffer passes the news on
            self._notify()

    def add(self, tuples: list[Any], indices: list[int] | None = None) -> None:
        """Tuples in index order; ``indices`` gives their indices when they do not carry them as ``i``
        (the row ids of a column page, ``row_store``)."""
        if indices is None:
            indices = [item["i"] for item in tuples] if tuples else []
        if tuples and indices[0] == self.buffer.next_index == indices[-1] - len(tuples) + 1:
            self.buffer.extend(tuples)  # the usual page: right after the last one, no holes (indices rise)
        else:
            for item, index in zip(tuples, indices, strict=True):
                self.buffer.append(item, index)
        self._received += len(tuples)
        self._notify()

    def retract(self, after: int, generation: int = 0) -> None:
        """The producer withdrew its tuples after ``after``: drop them; readers that took some hear of it."""
        self.retractions += 1
        self.retract_generation = max(self.retract_generation, generation)
        self.buffer.truncate_after(after)
        for cursor in self._cursors:
            if cursor.position > after:
                cursor.position = after
                cursor.retracted = after if cursor.retracted is None else min(cursor.retracted, after)
        self._room.set()
        self._notify()

    def reset(self) -> None:
        """The producer restarted: the buffer starts over, and so does every cursor."""
        if self.row_store is not None:  # rows nobody will read now
            consumed, first = self.consumed, self.buffer.first
            after = first - 1 if consumed is None else max(consumed, first - 1)
            self.row_store.forget(self.buffer.read(after, oldest=self.buffer.capacity).items)
        self.buffer.reset(0)
        self.generation += 1
        self._resets += 1
        for cursor in self._cursors:
            cursor.position = -1
        self._room.set()
        self._notify()

    def _notify(self) -> None:
        for listener in self.listeners:
            listener()

    # --- readers and back-pressure ------------------------------------------------------

    def resume_after(self, index: int) -> None:
        """Go on after ``index`` (a checkpoint's last tuple read): the pull asks for what follows it, and a reader
        made now starts there."""
        self.buffer.reset(index + 1)

    def cursor(self) -> Cursor:
        """A reader from the oldest tuple held (from the start, or from where ``resume_after`` put the channel):
        from now on, tuples it has not read are never overwritten."""
        cursor = Cursor(self, position=self.buffer.next_index - len(self.buffer) - 1)
        self._cursors.append(cursor)
        return cursor

    @property
    def consumed(self) -> int | None:
        """The newest index every reader has taken (None without readers: overwriting is harmless)."""
        return min((c.position for c in self._cursors), default=None)

    def release(self) -> None:
        """Let go of the tuples every reader has taken, now rather than when the ring comes round to them: an
        input's ring is sized for a lagging reader, and a whole ring of consumed tuples (decoded objects)
        would otherwise stay in memory for nothing. Makes room for the pull."""
        consumed = self.consumed
        if consumed is not None:
            self.buffer.drop_before(consumed + 1)
        self._room.set()

    def room(self) -> int:
        """How many more tuples fit without overwriting unread ones."""
        consumed = self.consumed
        if consumed is None:
            return self.buffer.capacity
        unread = self.buffer.last - max(consumed, self.buffer.first - 1)
        return self.buffer.capacity - unread

    async def wait_for_room(self, needed: int) -> None:
        """Hold the pull task until ``needed`` tuples fit (no timeout: the reader is in this process)."""
        needed = min(needed, self.buffer.capacity)
        if self.room() >= needed:
            return
        self._waits_for_reader += 1
        while self.room() < needed:
            self._room.clear()
            await self._room.wait()

    def describe(self) -> dict[str, Any]:
        counters = self.counters
        return {
            "source": self.source,
            "first": self.buffer.first,
            "last": self.buffer.last,
            "received": counters.received,
            "missed": counters.missed,
            "resets": counters.resets,
            "failovers": counters.failovers,
            "consumed": self.consumed,
            "waits_for_reader": counters.waits_for_reader,
            "retractions": self.retractions,
            "decode_errors": counters.decode_errors,
            "bad_sources": counters.bad_sources,
            "meta": self.progress.to_json(),
        }


@dataclass(eq=False)
class Cursor:
    """One reader's position in an input channel (made by ``InputChannel.cursor``)."""

    channel: InputChannel
    position: int = -1  # the newest index read
    retracted: int | None = None  # tuples after this index that this reader took were withdrawn (next read says so)
    _generation: int = field(init=False)

    def __post_init__(self) -> None:
        self._generation = self.channel.generation

    def read(self, limit: int) -> Batch:
        """Up to ``limit`` tuples after the position; taking them makes room for the pull."""
        channel = self.channel
        restarted = self._generation != channel.generation
        if restarted:  # the producer restarted: its indices start over
            self.position, self._generation = -1, channel.generation
        after, retracted, self.retracted = self.position, self.retracted, None
        page = channel.buffer.read(after, oldest=limit)
        if page.items:
            self.position = page.indices[-1]
            channel.release()
        return Batch(after, page.indices, page.items, page.missed, restarted, retracted)

    @property
    def caught_up(self) -> bool:
        """This reader has everything the publisher had at the last fetch."""
        return not self.channel.behind and self.position >= self.channel.buffer.last

    async def wait(self, timeout_s: float) -> None:
        """Until a tuple beyond the position arrives or the progress changes, at most ``timeout_s``."""
        await self.channel.buffer.wait_beyond(self.position, timeout_s, meta=True)


def settled_of(progress: StreamProgress) -> int | None:
    """The ``settled`` index a speculative producer adds to its raw pages' meta (None: absent or malformed)."""
    for key, value in progress.other:
        if key == "settled":
            return value if type(value) is int and value >= -1 else None
    return None
