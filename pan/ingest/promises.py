"""Whether an ingest server accepts a promise line: its value, its sender, how far it runs ahead.

``PromiseChecks`` is a base of ``IngestServer`` (pan/ingest/server.py), apart from its sockets because
the rules for promises (the server's module docstring) are a job of their own; they move the same stream
states as idleness (pan/ingest/idleness.py), whose base it extends.
"""

from __future__ import annotations

import time

from pan.ingest.counters import NOT_SENDER, TOO_FAR_AHEAD, bump
from pan.ingest.idleness import EdgeIdleness
from pan.ingest.lines import END_OF_STREAM
from pan.ingest.schema import INT, TS_OUT_OF_RANGE, check_value
from pan.ingest.streams import Connection
from pan.util.ratelimit import RateLimitedLog


class PromiseChecks(EdgeIdleness):
    """A chunk's promises: each accepted, or refused with its reason counted and logged."""

    # Set by ``IngestServer.__init__``.
    problems: RateLimitedLog
    _frontier: int | None
    _promise_ahead: int

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
                bump(self.counters.promises_refused, reason)
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
