"""One simulated sensor (``simulator/simulate.py``): its rows, paced or not, impaired or not, and its promises.

Every check period a paced sensor sends, in one write, every row whose due
time has passed; unpaced, it sends in slices of event time, as fast as its
receiver takes them. Impairments (``simulator.impair``) reshape the send schedule.

The simulator knows every sensor's next row, so it says what a live sensor
can only let its receiver guess: a sensor silent in event time (a dropout, a
ball out of play) sends promises ("no row older than T follows", T at most
the replay's current event time), and a sensor whose data is exhausted sends
an end promise before it closes.  A closed connection alone ends nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time

from pan.ingest.lines import END_OF_STREAM, promise_line
from pan.ingest.settings import DEFAULT_IDLE_AFTER_MS, DEFAULT_PROMISE_AHEAD_MS
from simulator.impair import Packet, SensorImpairment
from simulator.send_log import SendLog
from simulator.sensor_link import Link
from simulator.simulate_options import SimulateOptions
from simulator.simulate_pacing import EventTimeGate, Pacer
from simulator.simulate_summary import StreamStats
from simulator.sources import RowSource, Timeline

#: Under the simulator's name wherever the code is: what `pan simulate` logs is one logger to configure.
log = logging.getLogger("simulator.simulate")

MAX_BATCH = 8192  # rows per write when catching up or unpaced
#: A silent sensor's promise stays this far (event time) within the newest row sent to its receiver,
#: half the receivers' default ``promise_ahead_ms`` (rows on other connections may still be on their way).
PROMISE_AHEAD_PS = DEFAULT_PROMISE_AHEAD_MS * 10**9 // 2
#: A silent sensor whose promise cannot move (its next row is not due yet) says it again after this much
#: wall time: its receiver must not take it for idle and promise for it, which races its next rows. Well
#: below the receivers' default ``idle_after_ms``.
PROMISE_REPEAT_S = DEFAULT_IDLE_AFTER_MS / 1000 / 5


class SensorRunner:
    """Replays one stream over its own link, paced or not, impaired or not."""

    def __init__(self, stream: str, source: RowSource, link: Link, stats: StreamStats, timeline: Timeline,
                 impairment: SensorImpairment | None, options: SimulateOptions, send_log: SendLog | None,
                 frontier: dict[str, int] | None = None) -> None:
        self.stream, self.source, self.link, self.stats = stream, source, link, stats
        self.timeline, self.imp, self.opts, self.send_log = timeline, impairment, options, send_log
        self.limit_ts: int | None = None
        self.gave_up = False
        self._outage_closed = False
        #: The newest ts sent to each receiver (shared by the runners): promises stay close to it.
        self.frontier = frontier if frontier is not None else {}
        self._promised: int | None = None
        self._heard_at = 0.0  # monotonic time of the last row or promise sent (see PROMISE_REPEAT_S)
        self._sent_in_round = False

    def _stopped(self) -> bool:
        return self.opts.stop is not None and self.opts.stop.is_set()

    async def run(self, pacer: Pacer, gate: EventTimeGate) -> None:
        try:
            if self.opts.speedup == 0:
                exhausted = await self._run_unpaced(gate, pacer)
            else:
                exhausted = await self._run_paced(pacer)
            if exhausted and not self.gave_up:
                await self._send_end()
        finally:
            s = self.source.counts
            self.stats.skipped, self.stats.malformed = s.skipped, s.malformed
            await self.link.close()

    async def _run_paced(self, pacer: Pacer) -> bool:
        """Returns True once every row is sent (or lost), False when stopped."""
        now = -1
        while not self._stopped():
            now = await pacer.tick(now)
            self._sent_in_round = False
            if self.imp is None:
                self.limit_ts = limit = self.timeline.ts_limit(now)
                await self._send_up_to(limit, pacer)
                if self.source.exhausted:
                    return True
            else:
                self.limit_ts = limit = self.timeline.ts_limit(now)
                self._feed(self.timeline.ts_limit(now + self.imp.horizon_ns))
                for packet in self.imp.pop_due(now):
                    await self._handle(packet, pacer)
                if self.source.exhausted and self.imp.pending == 0:
                    return True
            await self._promise_if_silent(limit)
        return False

    async def _run_unpaced(self, gate: EventTimeGate, pacer: Pacer) -> bool:
        """Returns True once every row is sent (or lost), False when stopped."""
        finished = False
        while not finished and not self._stopped():
            await pacer.hold_while_braked()
            limit = gate.limit_ts
            self._sent_in_round = False
            if self.imp is None:
                await self._send_up_to(limit, None)
                finished = self.source.exhausted
            else:
                self._feed(limit)
                self.limit_ts = limit
                exhausted = self.source.exhausted
                virtual_now = float("inf") if exhausted else self.timeline.due_one(limit) - self.imp.horizon_ns
                for packet in self.imp.pop_due(virtual_now):
                    await self._handle(packet, None)
                finished = exhausted and self.imp.pending == 0
            if not finished:
                await self._promise_if_silent(limit)
            await gate.arrive(finished)
        if not finished:
            await gate.arrive(True)
        return finished

    async def _promise_if_silent(self, limit_ts: int) -> None:
        """A sensor that sent nothing this round promises how far it has come in event time.

        The promise is the smallest ts it may still send (its next row, or a
        held or queued one), at most ``limit_ts`` (the replay's current event
        time, so that it never runs ahead of the other sensors) and within
        ``PROMISE_AHEAD_PS`` of the newest row sent to its receiver. A sensor
        whose link is down (an outage) says nothing, like a real one. One with
        nothing new to promise repeats itself every ``PROMISE_REPEAT_S``.
        """
        if self._sent_in_round or self.gave_up or not self.link.connected:
            return
        receiver = self.stats.receiver or ""
        newest = self.frontier.get(receiver)
        if newest is None:
            return
        bound = min(limit_ts, newest + PROMISE_AHEAD_PS)
        nxt = self.source.peek_ts()
        if nxt is not None:
            bound = min(bound, nxt)
        if self.imp is not None:
            held = self.imp.oldest_unsent_ts()
            if held is not None:
                bound = min(bound, held)
        said = max((t for t in (self._promised, self.stats.last_ts) if t is not None), default=None)
        # With nothing new to promise, ``bound`` (still true) is said again now and then: the receiver must
        # hear that this sensor is there.
        if said is not None and bound <= said and time.monotonic() - self._heard_at < PROMISE_REPEAT_S:
            return
        if await self.link.send(promise_line(self.stream, bound) + b"\n"):
            self._promised = bound if self._promised is None else max(self._promised, bound)
            self._heard_at = time.monotonic()
            self.stats.promises += 1

    async def _send_end(self) -> None:
        """The sensor's data is exhausted: say so (a closed connection alone would mean nothing)."""
        if not await self.link.ensure(force=True):
            self.stats.error = self.stats.error or "end promise not sent: receiver unreachable"
            return
        if await self.link.send(promise_line(self.stream, END_OF_STREAM) + b"\n"):
            self.stats.ended = True

    def _feed(self, limit_ts: int) -> None:
        assert self.imp is not None
        while True:
            ts, lines = self.source.take(limit_ts, MAX_BATCH)
            if not ts:
                break
            self.imp.feed(ts, lines)
        if self.source.exhausted:
            self.imp.finish()
        else:
            self.imp.close_partial(limit_ts)

    async def _handle(self, packet: Packet, pacer: Pacer | None) -> None:
        if packet.fate == "lost":
            self.stats.lost_impairment += len(packet.ts)
        elif packet.fate == "outage":
            self.stats.lost_outage += len(packet.ts)
            if self.link.connected:
                await self.link.close()  # the sensor is unreachable: its connection drops
                self._outage_closed = True
        else:
            # Reconnect at once after a simulated outage; real failures respect the backoff.
            await self._deliver(packet.ts, packet.lines, pacer, force_connect=self._outage_closed)
            self._outage_closed = False

    async def _send_up_to(self, limit: int, pacer: Pacer | None) -> None:
        """Every row with ts <= ``limit``, up to ``MAX_BATCH`` a write. Each write is a slice of the file's bytes,
        unless a send log wants every row's ts. Unpaced (no ``pacer``), ``limit_ts`` follows the rows sent."""
        rows = MAX_BATCH
        while rows == MAX_BATCH:  # fewer: the source stopped at the limit, or ran out
            if self.send_log is None:
                rows, newest, data = self.source.take_block(limit, MAX_BATCH)
                if newest is None:
                    return
                if pacer is None:
                    self.limit_ts = newest
                await self._send_rows(rows, newest, data, pacer)
            else:
                ts, lines = self.source.take(limit, MAX_BATCH)
                if not ts:
                    return
                if pacer is None:
                    self.limit_ts = ts[-1]
                rows = len(ts)
                await self._deliver(ts, lines, pacer)

    async def _deliver(self, ts: list[int], lines: list[bytes], pacer: Pacer | None,
                       force_connect: bool = False) -> None:
        """Send rows (of a file, or a packet of an impairment: their ts need not be in order), and log them."""
        sent = await self._send_rows(len(ts), max(ts), b"".join(lines), pacer, force_connect)
        if sent and self.send_log is not None:
            clock = pacer.clock if pacer is not None else self.opts.clock
            self.send_log.record(self.stream, ts, clock.now_ns())

    async def _send_rows(self, rows: int, newest: int, data: bytes, pacer: Pacer | None,
                         force_connect: bool = False) -> bool:
        """Send ``rows`` rows (``data``, their newest ts ``newest``); False if they are lost."""
        if self.gave_up:
            self.stats.lost_disconnected += rows
            return False
        if not await self.link.ensure(force=force_connect) and not await self._wait_for_link(pacer):
            self.stats.lost_disconnected += rows
            return False
        if not await self.link.send(data):
            self.stats.lost_disconnected += rows  # unknown how much arrived: the receiver went away
            return False
        self.stats.sent += rows
        self._heard_at = time.monotonic()
        if self.stats.last_ts is None or newest > self.stats.last_ts:
            self.stats.last_ts = newest
        receiver = self.stats.receiver or ""
        if newest > self.frontier.get(receiver, -1):
            self.frontier[receiver] = newest
        self._sent_in_round = True
        return True

    async def _wait_for_link(self, pacer: Pacer | None) -> bool:
        """Unpaced sensors wait (up to give_up_s) for their receiver; paced ones lose what is due."""
        if pacer is not None:
            return False
        deadline = time.monotonic() + self.opts.give_up_s
        while time.monotonic() < deadline and not self._stopped():
            await asyncio.sleep(0.05)
            if await self.link.ensure():
                return True
        self.gave_up = True
        log.warning("%s: giving up on receiver %s", self.stream, self.stats.receiver)
        return False
