"""The repository's state: which publishers serve which stream, under leases and limits.

Registrations are soft state.  Each one carries a lease that its publisher
refreshes by publishing again; a repository that restarts empty is whole
again after one refresh period, and the data plane never depends on it.

Streams per publisher, registrations in all and leases have limits
(``RegistryLimits``).  Leases expire lazily: a lookup drops its own stream's
expired publishers, and every request sweeps a bounded number of due
entries off a heap, so no request walks the whole registry.  The server in
front of it is pan/repository/server.py; ``choose_publisher`` picks among
a stream's publishers for ``/subscribe``.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

#: Due lease entries a request sweeps off the expiry heap (besides the streams it looks up itself).
SWEEP_STEPS = 256

Endpoint = tuple[str, int]


@dataclass(frozen=True, slots=True)
class RegistryLimits:
    """Bounds on what publishers may register; defaults leave a 14-peer full game (~450 streams,
    ~1,500 registrations with its repeaters) ample headroom."""

    #: Streams one publisher (host, port) may hold at once.
    max_streams_per_publisher: int = 10_000
    #: Registrations (stream, publisher) in all.
    max_registrations: int = 100_000
    #: Longest lease.  Workers ask for 3 x refresh_ms, and a workflow's refresh_ms may be up to 600 s.
    max_lease_ms: int = 1_800_000


class LimitExceeded(Exception):
    """A registration refused by ``RegistryLimits``; nothing of the request was registered."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason  # the label it is counted under
        self.message = message


@dataclass(slots=True)
class Publisher:
    host: str
    port: int
    rep: bool
    lvl: int
    expires_at: float

    @property
    def endpoint(self) -> Endpoint:
        return (self.host, self.port)

    def as_dict(self, now: float | None = None) -> dict[str, Any]:
        """The `/streams` entry; with ``now``, also the lease left (ms) at that time."""
        entry: dict[str, Any] = {"host": self.host, "port": self.port, "rep": self.rep, "lvl": self.lvl}
        if now is not None:
            entry["lease_ms"] = max(0, int((self.expires_at - now) * 1000))
        return entry


class Registry:
    """Stream name -> publishers, with leases measured on a monotonic clock.

    Indexes: by stream (lookups), by publisher (its stream count), a heap of
    lease deadlines (expiry in bounded steps) and a sorted name list for
    paging, rebuilt only after new names appear.
    """

    def __init__(self, limits: RegistryLimits | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits or RegistryLimits()
        self._clock = clock
        self._streams: dict[str, dict[Endpoint, Publisher]] = {}
        self._by_publisher: dict[Endpoint, set[str]] = {}
        # One entry per registration (plus stale ones of unpublished registrations, until due or rebuilt);
        # a refresh only moves ``expires_at``, and the sweep re-queues an entry that is due but refreshed.
        self._deadlines: list[tuple[float, int, str, Publisher]] = []
        self._seq = itertools.count()
        self._count = 0
        self._names: list[str] | None = None  # sorted; may hold removed names, skipped while paging
        self._removed_names = 0

    def now(self) -> float:
        """The registry's clock (leases expire on it)."""
        return self._clock()

    def __len__(self) -> int:
        """Registrations, counting expired ones not swept yet."""
        return self._count

    @property
    def stream_count(self) -> int:
        return len(self._streams)

    @property
    def publisher_count(self) -> int:
        return len(self._by_publisher)

    def publish(self, streams: Iterable[str], host: str, port: int, rep: bool, lvl: int, lease_ms: int) -> None:
        """Register or refresh ``host:port`` for every stream, or for none (``LimitExceeded``)."""
        names = list(dict.fromkeys(streams))
        endpoint = (host, port)
        self.sweep(max(SWEEP_STEPS, len(names)))
        new = self._new_for(endpoint, names)
        if self._count + new > self.limits.max_registrations:
            self.sweep(None)  # whatever has expired makes room first
            new = self._new_for(endpoint, names)
            if self._count + new > self.limits.max_registrations:
                raise LimitExceeded(
                    "registry_full",
                    f"the repository holds {self._count} registrations; {new} more would pass its limit of "
                    f"{self.limits.max_registrations}",
                )
        held = len(self._by_publisher.get(endpoint, ()))
        if held + new > self.limits.max_streams_per_publisher:
            raise LimitExceeded(
                "publisher_streams",
                f"{host}:{port} holds {held} streams; {new} more would pass the limit of "
                f"{self.limits.max_streams_per_publisher} per publisher",
            )
        expires = self._clock() + lease_ms / 1000
        mine = self._by_publisher.setdefault(endpoint, set())
        for name in names:
            publishers = self._streams.get(name)
            if publishers is None:
                publishers = self._streams[name] = {}
                self._names = None
            pub = publishers.get(endpoint)
            if pub is None:
                pub = publishers[endpoint] = Publisher(host, port, rep, lvl, expires)
                mine.add(name)
                self._count += 1
                heapq.heappush(self._deadlines, (expires, next(self._seq), name, pub))
            else:
                pub.rep, pub.lvl, pub.expires_at = rep, lvl, expires
        if len(self._deadlines) > 2 * self._count + 1024:  # stale entries of unpublished registrations
            self._rebuild_deadlines()

    def _new_for(self, endpoint: Endpoint, names: list[str]) -> int:
        mine = self._by_publisher.get(endpoint, set())
        return sum(1 for name in names if name not in mine)

    def adopt(self, stream: str, host: str, port: int, rep: bool, lvl: int, lease_ms: int) -> bool:
        """Take a registration a replica holds, unless this registry's own lease of it runs longer; True if taken."""
        held = self._streams.get(stream, {}).get((host, port))
        if held is not None and held.expires_at >= self._clock() + lease_ms / 1000:
            return False
        self.publish([stream], host, port, rep, lvl, lease_ms)
        return True

    def unpublish(self, stream: str, host: str, port: int) -> bool:
        """Drop a registration; False if there was none (or only an expired one)."""
        pub = self._streams.get(stream, {}).get((host, port))
        if pub is None:
            return False
        self._remove(stream, pub.endpoint)
        return pub.expires_at > self._clock()

    def publishers(self, stream: str) -> list[Publisher]:
        """The stream's live publishers; costs its own publishers plus one bounded sweep step."""
        self.sweep(SWEEP_STEPS)
        return self._live(stream, self._clock())

    def page(self, after: str | None, limit: int) -> tuple[list[tuple[str, list[Publisher]]], str | None]:
        """Up to ``limit`` streams named after ``after``, in name order, and the cursor of the next page."""
        self.sweep(SWEEP_STEPS)
        now = self._clock()
        names = self._sorted_names()
        start = 0 if after is None else bisect.bisect_right(names, after)
        rows: list[tuple[str, list[Publisher]]] = []
        for index in range(start, len(names)):
            if len(rows) == limit:
                return rows, rows[-1][0]
            publishers = self._live(names[index], now)
            if publishers:
                rows.append((names[index], publishers))
        return rows, None

    def snapshot(self) -> dict[str, list[Publisher]]:
        """Every stream with its live publishers (tests and small registries; servers page instead)."""
        rows, _ = self.page(None, len(self._streams) + 1)
        return dict(rows)

    def sweep(self, max_steps: int | None) -> int:
        """Take due entries off the deadline heap (at most ``max_steps``), expiring their registrations."""
        now = self._clock()
        steps = 0
        heap = self._deadlines
        while heap and heap[0][0] <= now and (max_steps is None or steps < max_steps):
            _, _, name, pub = heapq.heappop(heap)
            steps += 1
            if self._streams.get(name, {}).get(pub.endpoint) is not pub:
                continue  # unpublished (and maybe registered anew, with its own entry)
            if pub.expires_at <= now:
                self._remove(name, pub.endpoint)
            else:  # refreshed since it was queued
                heapq.heappush(heap, (pub.expires_at, next(self._seq), name, pub))
        return steps

    def _live(self, stream: str, now: float) -> list[Publisher]:
        publishers = self._streams.get(stream)
        if publishers is None:
            return []
        for pub in [pub for pub in publishers.values() if pub.expires_at <= now]:
            self._remove(stream, pub.endpoint)
        return list(publishers.values())

    def _remove(self, stream: str, endpoint: Endpoint) -> None:
        publishers = self._streams[stream]
        del publishers[endpoint]
        self._count -= 1
        if not publishers:
            del self._streams[stream]
            self._removed_names += 1
        mine = self._by_publisher[endpoint]
        mine.discard(stream)
        if not mine:
            del self._by_publisher[endpoint]

    def _sorted_names(self) -> list[str]:
        if self._names is None or self._removed_names > len(self._streams):
            self._names = sorted(self._streams)
            self._removed_names = 0
        return self._names

    def _rebuild_deadlines(self) -> None:
        self._deadlines = [
            (pub.expires_at, next(self._seq), name, pub)
            for name, publishers in self._streams.items()
            for pub in publishers.values()
        ]
        heapq.heapify(self._deadlines)


def choose_publisher(
    candidates: list[Publisher],
    *,
    norep: bool,
    below_level: int | None,
    exclude: set[Endpoint],
    rng: random.Random,
) -> Publisher | None:
    """Random choice among the publishers a subscriber allows."""
    allowed = [
        pub
        for pub in candidates
        if not (norep and pub.rep)
        and (below_level is None or pub.lvl < below_level)
        and (pub.host, pub.port) not in exclude
    ]
    return rng.choice(allowed) if allowed else None
