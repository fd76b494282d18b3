"""Where a subscriber stands in a stream, and the rules that move it, apart from any fetching.

Kafka's consumer splits the same way: its Fetcher only talks to brokers, its
SubscriptionState holds the positions. ``SubscriptionState`` holds

* the **position** (the index of the last tuple delivered, ``-1`` before any)
  and whether it is known yet (``start="latest"`` learns it from the first answer);
* the producer's **epoch** and its latest **progress** (``meta``), so a restart
  is seen and the reset policy applied;
* the **failover** state: the current publisher, the ones that just failed
  (left out of the next lookup), how long to back off before asking again,
  and how many empty answers a lagging repeater has given.

``apply(answer)`` turns one decoded `/data` answer into a ``Fetch`` and moves
the state; it does no I/O, so every rule can be tested without a server.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from pan.repository.client import Source
from pan.wire.line_pages import Lines
from pan.wire.progress import EMPTY, StreamProgress

#: The subscriber's log, whichever part of it writes (operators filter on this name).
log = logging.getLogger("pan.input.subscriber")

Reset = Literal["earliest", "latest"]
LAGGING_FETCHES_BEFORE_SWITCH = 3  # empty long polls from a repeater behind our position


@dataclass(slots=True)
class SubscriberStats:
    received: int = 0  # tuples delivered
    missed: int = 0  # indices skipped because they were overwritten or lost upstream
    gaps: int = 0  # how many times a jump in indices happened
    resets: int = 0  # reset policy applied (producer restart, position out of range)
    failovers: int = 0  # publisher switches after a failure
    errors: int = 0  # failed requests of any kind
    decode_errors: int = 0  # publisher pages that could not be decoded or were malformed
    bad_sources: int = 0  # repository answers naming an unusable publisher address
    retractions: int = 0  # raw view: retract notices that withdrew tuples already delivered


@dataclass(slots=True)
class Fetch:
    """What one fetch brought: new tuples plus what happened on the way."""

    #: Decoded tuples, or with ``indices`` the publisher's encoded bytes of each (``encoded`` subscribers; `Lines`,
    #: one slice of bytes, from a line page that names its ``bytes``).
    tuples: list[Any] | Lines
    missed: int = 0
    reset: bool = False
    progress: StreamProgress = EMPTY
    #: Runs of missed indices (first, last), in order; each ends right before a tuple of this fetch.
    gaps: list[tuple[int, int]] = field(default_factory=list)
    #: Why the reset policy was applied (with ``reset``).
    reset_reason: str = ""
    #: Raw view of a speculative stream: (after, generation) of a retraction. Tuples after ``after`` that were
    #: delivered before are withdrawn; the subscriber reads on from ``after`` (its new position).
    retract: tuple[int, int] | None = None
    #: The index of each of ``tuples`` when they are encoded (None: read off the decoded tuples).
    indices: list[int] | None = None

    def markers(self, position: int, epoch: str | None) -> list[Any]:
        """The tuples with ``{"gap": ...}`` markers among them in index order, after a ``{"reset": ...}`` marker.

        ``position`` and ``epoch`` are the subscriber's after this fetch (where a reset resumed). Among
        encoded tuples the markers are encoded too.
        """
        out: list[Any] = []
        if self.retract is not None:
            out.append({"retract": {"after": self.retract[0], "generation": self.retract[1]}})
        if self.reset:
            out.append({"reset": {"reason": self.reset_reason, "epoch": epoch, "position": position}})
        gaps = iter(self.gaps)
        gap = next(gaps, None)
        indices = self.indices if self.indices is not None else [item["i"] for item in self.tuples]
        for index, item in zip(indices, self.tuples, strict=True):
            while gap is not None and gap[1] < index:
                out.append({"gap": {"from": gap[0], "to": gap[1]}})
                gap = next(gaps, None)
            out.append(item)
        if self.indices is None:
            return out
        return [item if type(item) is bytes else orjson.dumps(item) for item in out]


class SubscriptionState:
    """One subscriber's position, epoch, progress and failover state, with the rules that move them."""

    def __init__(
        self,
        stream: str,
        *,
        start: Reset | int = "earliest",
        reset: Reset = "earliest",
        exclude: tuple[str, ...] = (),
        retry_backoff_s: tuple[float, float] = (0.05, 1.0),
    ) -> None:
        self.stream = stream  # for log lines
        self.reset_policy: Reset = reset
        self.position = start if isinstance(start, int) else -1
        #: False until the first answer when starting at ``latest``: that fetch only asks for the newest index.
        self.positioned = isinstance(start, int) or start == "earliest"
        #: The raw view of a speculative stream (``view="raw"``): retract notices move the position back.
        self.raw_view = False
        self.raw_generation = 0  # the newest retract generation seen (the raw view asks with it, ``g``)
        self.epoch: str | None = None
        self.progress = EMPTY  # the publisher's ``meta`` in its latest answer
        self.upstream_last = -1  # the publisher's newest index at the last answer
        self.stats = SubscriberStats()
        self.source: Source | None = None
        self.always_exclude = set(exclude)
        self.failed: set[str] = set()  # publishers that just failed, left out of the next lookups
        self.retry_backoff_s = retry_backoff_s
        self.backoff_s = retry_backoff_s[0]
        self.lagging = 0  # empty answers in a row from a repeater behind our position

    # --- failover ------------------------------------------------------------------

    def excluded(self) -> set[str]:
        """Endpoints the next lookup must not name: the configured ones and those that just failed."""
        return self.always_exclude | self.failed

    def nobody_publishes(self) -> None:
        """The repository knows no publisher (but the excluded): those that failed may be back."""
        self.failed.clear()

    def drop_source(self, why: str) -> None:
        """The current publisher failed: count it, leave it out of the next lookups, look again."""
        assert self.source is not None
        self.stats.errors += 1
        self.stats.failovers += 1
        log.info("%s: publisher %s failed (%s); looking for another", self.stream, self.source.endpoint, why)
        self.failed.add(self.source.endpoint)
        self.source = None

    def next_backoff_s(self) -> float:
        """How long to wait before trying again; each wait doubles the next, up to the maximum."""
        wait = self.backoff_s
        self.backoff_s = min(self.backoff_s * 2, self.retry_backoff_s[1])
        return wait

    def answered(self) -> None:
        """A publisher answered: the next trouble backs off from the minimum again."""
        self.backoff_s = self.retry_backoff_s[0]

    # --- one answer ------------------------------------------------------------------

    def apply(self, answer: dict[str, Any]) -> Fetch:
        """Move the state by one checked `/data` answer of the current publisher; what it delivers."""
        progress = StreamProgress.from_json(answer.get("meta"))
        self.progress = progress
        epoch = progress.epoch
        last = answer.get("last", -1)
        self.upstream_last = last
        if not self.positioned:  # start=latest: begin after the newest tuple
            self.position, self.epoch, self.positioned = last, epoch, True
            return Fetch([], progress=progress)
        if self.epoch is not None and epoch is not None and epoch != self.epoch:
            self.epoch = epoch
            self.raw_generation = 0  # a new run of the producer counts its retractions from 0
            return self._reset(f"producer restarted (epoch {epoch})", last)
        self.epoch = epoch
        notice = progress_retract(answer.get("meta")) if self.raw_view else None
        if notice is not None and notice[1] > self.raw_generation:
            self.raw_generation = notice[1]
            if notice[0] < self.position:  # we delivered tuples that are withdrawn: read again after them
                self.position = notice[0]
                self.stats.retractions += 1
                return Fetch([], progress=progress, retract=notice)
        if self.position > last and not answer.get("tuples"):
            if resumed_from(progress) is not None:
                # A producer restored from a checkpoint, under its epoch: it produces again, with the same
                # indices, what came after its checkpoint, and so gets to our position.
                return Fetch([], progress=progress)
            if self.source is not None and not self.source.rep:
                # The original producer will never reach our position again.
                return self._reset(f"position {self.position} beyond last index {last}", last)
            self.lagging += 1
            if self.lagging >= LAGGING_FETCHES_BEFORE_SWITCH:
                self.drop_source(f"repeater lags behind position {self.position} (last {last})")
            return Fetch([], progress=progress)
        self.lagging = 0
        tuples: list[Any] | Lines = answer.get("tuples") or []
        encoded: list[int] | None = answer.get("indices")  # a line page's: its tuples are bytes
        missed = 0
        gaps: list[tuple[int, int]] = []
        if tuples and self._follows_on(tuples, encoded):
            self.position += len(tuples)  # the usual case: a contiguous page right after our position
        else:
            indices = encoded if encoded is not None else [item["i"] for item in tuples]
            if type(tuples) is Lines:  # a line page's slice of bytes, cut into its tuples to leave some out
                tuples = tuples.items()
            tuples, kept, gaps = self._filter(tuples, indices)
            encoded = kept if encoded is not None else None
            missed = sum(to - first + 1 for first, to in gaps)
        if missed:
            self.stats.missed += missed
            log.warning("%s: %d tuples missed before index %d", self.stream, missed, self.position)
        self.stats.received += len(tuples)
        return Fetch(tuples, missed=missed, progress=progress, gaps=gaps, indices=encoded)

    def _follows_on(self, tuples: list[Any], indices: list[int] | None) -> bool:
        """The page's tuples are the ones right after our position, without holes."""
        first, last = (indices[0], indices[-1]) if indices is not None else (tuples[0]["i"], tuples[-1]["i"])
        return bool(first == self.position + 1 and last == self.position + len(tuples))

    def _filter(self, page: list[Any], indices: list[int]) -> tuple[list[Any], list[int], list[tuple[int, int]]]:
        """Drop what was already delivered; index jumps become gaps (first and last missed index).

        Returns the tuples kept, their indices, and the gaps."""
        if not isinstance(page, list):  # a column page (a record batch): what is new is a slice of it
            return self._filter_columns(page, indices)
        tuples: list[Any] = []
        kept: list[int] = []
        gaps: list[tuple[int, int]] = []
        for index, item in zip(indices, page, strict=True):
            if index <= self.position:
                continue  # already delivered (never hand out duplicates)
            if index > self.position + 1:
                gaps.append((self.position + 1, index - 1))
                self.stats.gaps += 1
            tuples.append(item)
            kept.append(index)
            self.position = index
        return tuples, kept, gaps

    def _filter_columns(self, page: Any, indices: list[int]) -> tuple[Any, list[int], list[tuple[int, int]]]:
        """``_filter`` of a record batch: a publisher's indices rise, so the tuples not delivered yet are the
        batch from the first index beyond our position on (``bisect``), gaps the jumps among their indices
        (``arrow_pages.decode_columns`` checked that they rise)."""
        start = bisect_right(indices, self.position)
        kept = indices[start:]
        gaps: list[tuple[int, int]] = []
        for index in kept:
            if index > self.position + 1:
                gaps.append((self.position + 1, index - 1))
                self.stats.gaps += 1
            self.position = index
        return page.slice(start), kept, gaps

    def _reset(self, why: str, last: int) -> Fetch:
        self.stats.resets += 1
        self.position = -1 if self.reset_policy == "earliest" else last
        log.warning("%s: %s; reset to %s (position %d)", self.stream, why, self.reset_policy, self.position)
        return Fetch([], reset=True, progress=self.progress, reset_reason=why)


def resumed_from(progress: StreamProgress) -> int | None:
    """The index a producer restored from a checkpoint went on from (its meta's ``resumed``), or None."""
    for key, value in progress.other:
        if key == "resumed":
            return value if type(value) is int and value >= 0 else None
    return None


def progress_retract(meta: Any) -> tuple[int, int] | None:
    """The ``retract`` notice of a raw page's meta as (after, generation), or None (absent or malformed)."""
    notice = meta.get("retract") if isinstance(meta, dict) else None
    if not isinstance(notice, dict):
        return None
    after, generation = notice.get("after"), notice.get("generation")
    if type(after) is not int or type(generation) is not int or after < -1 or generation < 1:
        return None
    return after, generation
