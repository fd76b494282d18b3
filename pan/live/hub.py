"""One shared PAN subscription per stream, fanned out to many viewers, each of whom keeps only the newest.

A live view (``pan/live/web.py``) has many viewers (browser tabs) that want overlapping sets of streams.
The publishers must not pay for every tab, so the hub opens one ``StreamSubscriber`` per stream, lazily
when the first viewer wants it, and closes it when the last one leaves. Each viewer holds one bounded
slot per stream with the newest tuples: a viewer that reads slowly finds the slot overwritten (a skipped
frame, counted) instead of a queue that grows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pan.input.subscriber import StreamSubscriber
from pan.repository.client import Address

log = logging.getLogger(__name__)

Tuple = dict[str, Any]
#: A value made in this process: a coroutine that calls ``emit`` with new values until it is cancelled.
Source = Callable[[Callable[[list[Tuple]], None]], Coroutine[Any, Any, None]]
#: Streams the hub subscribes to at most, over all viewers: names beyond it are refused (counted).
MAX_STREAMS = 2000
#: Tuples a stream keeps for a viewer's slot unless ``keep`` says otherwise: the newest only.
DEFAULT_KEEP = 1


@dataclass(slots=True)
class HubStats:
    """What ``/metrics`` shows of the hub: subscriptions are what the publishers pay for."""

    opened: int = 0  # subscriptions opened since start
    closed: int = 0
    tuples: int = 0  # tuples received from PAN, over all streams
    skipped: int = 0  # slot values overwritten before a viewer read them
    refused: int = 0  # wanted names not subscribed because the hub holds MAX_STREAMS already
    failures: int = 0  # failed reads of a subscription (each retried a second later)


@dataclass(eq=False)
class Viewer:
    """One consumer of the hub: the newest tuples per wanted stream, and an event when any changed."""

    hub: StreamHub
    slots: dict[str, list[Tuple]] = field(default_factory=dict)
    #: Streams whose subscription fails, with why (e.g. the repository refused a missing token), until taken.
    problems: dict[str, str] = field(default_factory=dict)
    wanted: set[str] = field(default_factory=set)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def want(self, streams: Iterable[str]) -> None:
        """Replace the set of wanted streams: subscribe to the new ones, drop the others."""
        self.hub.want(self, set(streams))

    def take(self) -> dict[str, list[Tuple]]:
        """Everything new since the last take, emptying the slots (take ``take_problems`` first)."""
        slots, self.slots = self.slots, {}
        self.changed.clear()
        return slots

    def take_problems(self) -> dict[str, str]:
        """Why streams failed since the last take (stream -> reason), emptied."""
        problems, self.problems = self.problems, {}
        return problems

    def offer(self, stream: str, recent: list[Tuple]) -> None:
        if stream in self.slots:
            self.hub.stats.skipped += 1
        self.slots[stream] = recent
        self.changed.set()

    def trouble(self, stream: str, problem: str) -> None:
        self.problems[stream] = problem
        self.changed.set()

    def close(self) -> None:
        self.hub.want(self, set())


@dataclass(eq=False)
class SharedStream:
    """One stream's subscription, its newest tuples and the viewers that watch it."""

    name: str
    keep: int
    recent: deque[Tuple]
    viewers: set[Viewer] = field(default_factory=set)
    task: asyncio.Task[None] | None = None
    #: Wall time (time.time()) the hub received the newest tuple, for the delay series.
    received_at: float = 0.0
    #: Why the subscription fails now (None while it works): new viewers are told at once, as of a value.
    problem: str | None = None


class StreamHub:
    """Shared subscriptions, opened when a viewer first wants a stream and closed when nobody does."""

    def __init__(
        self,
        repositories: Address | Sequence[Address],
        *,
        token: str | None = None,
        keep: Callable[[str], int] = lambda _stream: DEFAULT_KEEP,
        subscriber_options: dict[str, Any] | None = None,
        sources: dict[str, Source] | None = None,
    ) -> None:
        """``keep(stream)``: how many of a stream's newest tuples a slot holds (a feed wants more than one);
        ``sources``: values made in this process (by name), watched like streams but costing PAN nothing."""
        self.repositories = repositories
        self.token = token
        self.keep = keep
        self.subscriber_options = {"max_wait_ms": 1000, "request_timeout_s": 5.0, **(subscriber_options or {})}
        self.sources = dict(sources or {})
        self.streams: dict[str, SharedStream] = {}
        self.stats = HubStats()
        self.on_tuples: list[Callable[[str, list[Tuple], float], None]] = []  # observers (e.g. delay series)

    def viewer(self) -> Viewer:
        return Viewer(self)

    @property
    def subscriptions(self) -> int:
        """Open PAN subscriptions: one per stream someone watches."""
        return sum(1 for name in self.streams if name not in self.sources)

    def want(self, viewer: Viewer, streams: set[str]) -> None:
        for name in viewer.wanted - streams:
            shared = self.streams.get(name)
            if shared is not None:
                shared.viewers.discard(viewer)
                if not shared.viewers:
                    self._close(shared)
            viewer.slots.pop(name, None)
        for name in sorted(streams - viewer.wanted):
            shared = self.streams.get(name)
            if shared is None:
                if len(self.streams) >= MAX_STREAMS:
                    self.stats.refused += 1
                    streams = streams - {name}
                    continue
                shared = self._open(name)
            shared.viewers.add(viewer)
            if shared.recent:  # a new viewer sees the stream's state at once, not at its next tuple
                viewer.offer(name, list(shared.recent))
            if shared.problem is not None:
                viewer.trouble(name, shared.problem)
        viewer.wanted = set(streams)

    def _open(self, name: str) -> SharedStream:
        keep = max(1, self.keep(name))
        shared = SharedStream(name, keep, deque(maxlen=keep))
        source = self.sources.get(name)
        work = self._pull(shared) if source is None else source(lambda values: self._deliver(shared, values))
        shared.task = asyncio.get_running_loop().create_task(work, name=f"hub:{name}")
        self.streams[name] = shared
        if source is None:
            self.stats.opened += 1
        return shared

    def _close(self, shared: SharedStream) -> None:
        del self.streams[shared.name]
        if shared.task is not None:
            shared.task.cancel()
        if shared.name not in self.sources:
            self.stats.closed += 1

    async def _pull(self, shared: SharedStream) -> None:
        """Read from the newest tuples on (a live view wants now, not the backlog) until cancelled."""
        subscriber = StreamSubscriber(shared.name, self.repositories, start="latest", reset="latest",
                                      token=self.token, page_size=max(shared.keep, 100), **self.subscriber_options)
        async with subscriber:
            positioned = False
            while True:
                try:
                    fetch = await subscriber.fetch()
                    if not positioned:
                        # The first answer only says where the stream stands; step back to show its newest tuples.
                        positioned = True
                        if subscriber.position >= 0:
                            subscriber.state.position = max(-1, subscriber.position - shared.keep)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # a bad publisher or repository must not end the view
                    self._trouble(shared, str(exc) or type(exc).__name__)
                    await asyncio.sleep(1.0)
                    continue
                shared.problem = None
                if fetch.tuples:
                    self.stats.tuples += len(fetch.tuples)
                    self._deliver(shared, fetch.tuples)

    def _trouble(self, shared: SharedStream, problem: str) -> None:
        """Tell the stream's viewers why it shows nothing (a refused token is not an empty stream); log it once."""
        if problem != shared.problem:
            log.warning("%s: %s", shared.name, problem)
        shared.problem = problem
        self.stats.failures += 1
        for viewer in shared.viewers:
            viewer.trouble(shared.name, problem)

    def _deliver(self, shared: SharedStream, tuples: list[Tuple]) -> None:
        now = time.time()
        shared.received_at = now
        shared.recent.extend(tuples[-shared.keep:])
        recent = list(shared.recent)
        for viewer in shared.viewers:
            viewer.offer(shared.name, recent)
        if shared.name not in self.sources:
            for observer in self.on_tuples:
                observer(shared.name, tuples, now)

    async def close(self) -> None:
        tasks = [s.task for s in self.streams.values() if s.task is not None]
        for shared in list(self.streams.values()):
            self._close(shared)
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
