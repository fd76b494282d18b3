"""One simulated sensor's TCP connection to its receiver (``simulator/simulate.py``).

Rows due while a receiver is unreachable are lost (the sensor keeps trying
to reconnect with backoff) and counted; nothing a receiver does stops the
simulation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from simulator.simulate_summary import StreamStats

#: Under the simulator's name wherever the code is: what `pan simulate` logs is one logger to configure.
log = logging.getLogger("simulator.simulate")


class Link:
    """One sensor's TCP connection, reconnecting with exponential backoff."""

    def __init__(self, name: str, host: str, port: int, stats: StreamStats, connect_timeout_s: float) -> None:
        self.name, self.host, self.port = name, host, port
        self.stats = stats
        self.connect_timeout_s = connect_timeout_s
        self.writer: asyncio.StreamWriter | None = None
        self.reader: asyncio.StreamReader | None = None  # never read from: it only notices the receiver closing
        self._backoff_s = 0.05
        self._next_attempt = 0.0
        self._reported = False

    @property
    def connected(self) -> bool:
        """Open, and not closed by the receiver (forwarders close connections that stay idle too long)."""
        closed_by_receiver = self.reader is not None and self.reader.at_eof()
        return self.writer is not None and not self.writer.is_closing() and not closed_by_receiver

    async def ensure(self, force: bool = False) -> bool:
        """Connected afterwards?  Attempts respect the backoff unless ``force``."""
        if self.connected:
            return True
        if self.writer is not None:  # closed by the receiver: writing on would lose the rows
            await self.close()
        if not force and time.monotonic() < self._next_attempt:
            return False
        try:
            self.reader, self.writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port), self.connect_timeout_s
            )
        except (OSError, TimeoutError) as exc:
            self.writer = None
            self.stats.connect_failures += 1
            self.stats.error = f"cannot connect to {self.host}:{self.port}: {exc or 'timeout'}"
            if not self._reported:
                log.warning("%s: receiver %s:%d unreachable (%s); retrying", self.name, self.host,
                            self.port, exc or "timeout")
                self._reported = True
            self._next_attempt = time.monotonic() + self._backoff_s
            self._backoff_s = min(self._backoff_s * 2, 2.0)
            return False
        self.stats.connects += 1
        self._backoff_s, self._reported = 0.05, False
        return True

    async def send(self, data: bytes) -> bool:
        if self.writer is None:
            return False
        try:
            self.writer.write(data)
            await self.writer.drain()
        except (ConnectionError, OSError) as exc:
            log.warning("%s: connection to %s:%d lost: %s", self.name, self.host, self.port, exc)
            self.stats.error = f"connection lost: {exc}"
            await self.close()
            return False
        self.stats.writes += 1
        return True

    async def close(self) -> None:
        writer, self.writer = self.writer, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
