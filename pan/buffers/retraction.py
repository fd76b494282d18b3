"""Replays and retraction of an output stream: withdrawing tuples, replaying over held ones, the settled prefix.

A mixin of ``OutputStream`` (pan/buffers/streams.py), whose ``__init__`` sets the state used here; apart
because speculative producers alone need it (docs/ordering.md, "Speculation").
"""

from __future__ import annotations

from collections import deque

from pan.buffers.ringbuffer import RingBuffer
from pan.buffers.tuples import ts_of
from pan.wire.progress import StreamProgress

#: Rewinds of a speculative output remembered for raw readers that missed some (``retract_notice``).
MAX_REWINDS = 4096


class Retraction:
    """Rewinds, replays and the settled prefix of ``OutputStream``."""

    name: str
    buffer: RingBuffer[bytes]
    progress: StreamProgress
    held_bytes: int
    _sizes: list[int]
    _sizes_start: int
    retractions: int
    retracted_tuples: int
    _rewinds: list[tuple[int, int]]
    settled: int | None
    _replay_next: int | None
    replayed_same: int
    _pending: deque[tuple[int, int]]
    _pending_scanned: int
    next_index: int  # a property of OutputStream; ``_set_progress`` is in pan/buffers/watermarks.py

    def rewind(self, after: int, generation: int | None = None) -> None:
        """Withdraw the tuples after index ``after`` (a speculative component revises its output).

        The next tuples reuse the indices from ``after + 1`` on, and every page from now on carries
        ``retract: {"after": n, "generation": g}`` in its meta, so a reader that already read past
        ``n`` drops what it holds beyond ``n`` and reads again (docs/ordering.md, "Speculation").
        ``generation``: a repeater passes its source's on, so readers may fail over between them.
        """
        if after + 1 >= self.buffer.next_index:
            if generation is not None and generation > self.retractions:  # keep the source's count all the same
                self._note_rewind(self.buffer.next_index - 1, generation)
            return
        if self.settled is not None and after < self.settled:
            raise ValueError(f"{self.name}: cannot withdraw settled tuples (after {after}, settled {self.settled})")
        self.retracted_tuples += self.buffer.next_index - after - 1
        self.buffer.truncate_after(after)
        self._forget_pending()
        gone = len(self._sizes) - self._sizes_start - len(self.buffer)
        if gone > 0:
            self.held_bytes -= sum(self._sizes[-gone:])
            del self._sizes[-gone:]
        self._note_rewind(after, generation)

    def _note_rewind(self, after: int, generation: int | None) -> None:
        """Number the rewind (its generation) and tell raw readers from the next page on."""
        self.retractions = max(self.retractions + 1, generation or 0)
        self._rewinds.append((self.retractions, after))
        if len(self._rewinds) > MAX_REWINDS:
            del self._rewinds[: len(self._rewinds) - MAX_REWINDS]
        notice = {"after": after, "generation": self.retractions}
        self._set_progress(self.progress.merged(StreamProgress.from_json({"retract": notice})))

    # --- on-demand retraction (seed 002 §4.3.2) ------------------------------------------

    def replay_from(self, after: int) -> None:
        """The component goes back to index ``after`` and replays: hold the tuples after it as they are.

        Nothing is withdrawn yet. Each tuple the replay emits is compared with the one held under its
        index; equal ones stay (no reader hears of them), the first that differs withdraws everything
        from its index on (``rewind``), and ``end_replay`` withdraws what the replay did not emit again.
        So a retraction travels downstream only when the output really changed.
        """
        if after + 1 >= self.next_index:
            return
        self._replay_next = after + 1

    def end_replay(self) -> None:
        """The replay is over: withdraw the held tuples it did not emit again."""
        if self._replay_next is None:
            return
        after, self._replay_next = self._replay_next - 1, None
        self.rewind(after)

    def _replayed(self, encoded: list[bytes]) -> list[bytes]:
        """Match replayed tuples against the held ones; returns those to append (after a rewind, if any)."""
        position = self._replay_next
        assert position is not None
        for n, item in enumerate(encoded):
            if position >= self.buffer.next_index:  # every held tuple came again: append the rest
                self._replay_next = None
                return encoded[n:]
            if self.buffer.at(position) != item:  # the output changed here: withdraw from here on
                self._replay_next = None
                self.rewind(position - 1)
                return encoded[n:]
            position += 1
            self.replayed_same += 1
        self._replay_next = position
        if position >= self.buffer.next_index:
            self._replay_next = None
        return []

    def settle(self, index: int) -> None:
        """Tuples up to ``index`` are final (a speculative producer's settled prefix); wakes settled readers."""
        index = min(index, self.buffer.next_index - 1)
        if self.settled is None or index > self.settled:
            self.settled = index
            self.buffer.poke()

    def unsettled_min_ts(self) -> int | None:
        """The smallest ``ts`` of the tuples after the settled prefix (None: none, or every tuple is final).

        A speculative producer's watermark is a promise about the settled view: it must stay below
        every tuple that may still settle (or be withdrawn and emitted again) under it. Each tuple is
        looked at once (``_pending``), so asking after every release costs little.
        """
        if self.settled is None:
            return None
        pending = self._pending
        last = self.buffer.next_index - 1
        for index in range(max(self._pending_scanned + 1, self.settled + 1, self.buffer.first), last + 1):
            ts = ts_of(self.buffer.at(index))
            if ts is None:
                continue
            while pending and pending[-1][1] >= ts:
                pending.pop()
            pending.append((index, ts))
        self._pending_scanned = max(self._pending_scanned, last)
        while pending and pending[0][0] <= self.settled:
            pending.popleft()
        return pending[0][1] if pending else None

    def _forget_pending(self) -> None:
        """Tuples were withdrawn: ``unsettled_min_ts`` looks at every unsettled tuple afresh (one it dropped
        because a withdrawn tuple had a smaller ts may be the smallest again)."""
        self._pending.clear()
        self._pending_scanned = -1

    def retract_notice(self, generation: int) -> dict[str, int] | None:
        """What a raw reader that has seen ``generation`` must drop: every tuple after ``after`` (None: nothing).

        The smallest ``after`` of the rewinds since; a reader further behind than the history kept
        re-reads from the oldest tuple held.
        """
        if generation >= self.retractions:
            return None
        missed = [after for gen, after in self._rewinds if gen > generation]
        if len(missed) < self.retractions - generation:
            missed.append(self.buffer.next_index - len(self.buffer) - 1)
        return {"after": min(missed), "generation": self.retractions}
