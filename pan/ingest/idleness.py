"""Idleness at the edge: an ingest server declares a silent stream idle and promises for it.

``EdgeIdleness`` is a base of ``IngestServer`` (pan/ingest/server.py), apart from its sockets because
this is the one place where wall time turns into event-time progress (the rule: the server's module
docstring).
"""

from __future__ import annotations

import asyncio
import logging
import time

from pan.ingest.counters import IngestCounters
from pan.ingest.lines import OnPromise
from pan.ingest.streams import StreamState

#: Under the server's name wherever the code is: what the ingest door logs is one logger to configure.
log = logging.getLogger("pan.ingest.server")

#: If the idle check itself runs this much later than planned, this process was not running (stopped,
#: starved): it did not see the silence, so every stream's idle timer starts again.
IDLE_CHECK_STALL_S = 0.5


class EdgeIdleness:
    """Streams silent for ``idle_after_ms`` while others go on are declared idle and promised for."""

    # Set by ``IngestServer.__init__``.
    streams: dict[str, StreamState]
    counters: IngestCounters
    _on_promise: OnPromise | None
    _idle_after_s: float
    _all_quiet: bool

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
