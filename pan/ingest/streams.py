"""What an ingest server knows of its senders (``Connection``) and of each input stream (``StreamState``).

Apart because idleness (pan/ingest/idleness.py), the promise checks (pan/ingest/promises.py) and the
delivery of rows (pan/ingest/delivery.py) all read and move these states.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(eq=False)
class Connection:
    """One sender: while it is open, only it may promise for the streams it carries data for."""

    address: str
    open: bool = True


@dataclass(eq=False, slots=True)
class StreamState:
    """What the server knows of one input stream, over all connections."""

    newest: int | None = None  # ts of the last row (senders send in ts order)
    promised: int | None = None  # newest promise made for it (by its sender or by this server), below the end
    ended: bool = False
    heard: float = 0.0  # monotonic time of its last row or accepted promise
    idle: bool = False
    carrier: Connection | None = None  # the connection that last sent rows of it

    @property
    def progress(self) -> int | None:
        if self.promised is None or (self.newest is not None and self.newest > self.promised):
            return self.newest
        return self.promised
