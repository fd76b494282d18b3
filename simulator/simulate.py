"""The sensor simulator: replays a `pan split` folder as live sensors into a workflow.

Each sensor is an independent transmitter with its own TCP connection to the
worker the workflow names as its receiver, all driven by one asyncio loop.
Pacing follows a time provider (local time or WeakTrueTime), so several
simulator processes on several machines replay the same moment of the match
at the same moment: every check period each sensor sends, in one write,
every row whose due time has passed.  ``speedup`` 0 drops pacing and sends
as fast as the receivers take it, still per sensor and in ts order.

Rows due while a receiver is unreachable are lost (the sensor keeps trying
to reconnect with backoff) and counted; nothing a receiver does stops the
simulation.  Impairments (``simulator.impair``) reshape the send schedule.

The simulator knows every sensor's next row, so it says what a live sensor
can only let its receiver guess: a sensor silent in event time (a dropout, a
ball out of play) sends promises ("no row older than T follows", T at most
the replay's current event time), and a sensor whose data is exhausted sends
an end promise before it closes.  A closed connection alone ends nothing.
Receivers therefore never have to declare a replayed sensor idle on wall
time, and a replay's results do not depend on how fast it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from pan.config.specs import Workflow, ingest_port, inter_pan_inputs
from pan.ingest.lines import END_OF_STREAM, promise_line
from pan.ingest.server import send_lines
from pan.ingest.settings import DEFAULT_IDLE_AFTER_MS, DEFAULT_PROMISE_AHEAD_MS
from pan.util import console
from simulator.clock import LocalTime, TimeProvider
from simulator.debs import HALF1, HALF2
from simulator.impair import ImpairProfile, Packet, SensorImpairment
from simulator.sources import (
    INTERRUPTIONS_FILE,
    INTERRUPTIONS_STREAM,
    RowSource,
    Timeline,
    first_ts,
    halftime_break,
    interruption_lines,
    last_ts,
    sensor_files,
)
from simulator.wtt import Address, WTTMaster, WTTSlaveTime

if TYPE_CHECKING:
    from simulator.backpressure import FeedBrake

log = logging.getLogger(__name__)

MAX_BATCH = 8192  # rows per write when catching up or unpaced
CONNECT_TIMEOUT_S = 2.0  # one connection attempt to a receiver
GIVE_UP_S = 10.0  # unpaced: how long a sensor waits for an unreachable receiver before counting its rows lost
PS_PER_S = 10**12
# INTERRUPTIONS heartbeats every 10 ms of event time: consumers of the sparse stream release events
# only once it has moved past them, so the period is a floor under their query delay.
HEARTBEAT_PS = 10 * 10**9
#: Unpaced sensors advance together in slices of this much event time (`EventTimeGate`). A slice is a write per
#: sensor, and a read at its receiver: 200 ms against 50 made an unpaced 3-peer replay 8% faster end to end with
#: a tenth less driver CPU (5 interleaved each, 2026-11-28: 118,139 against 108,904 rows/s; 2.5 against 2.8 s),
#: 500 ms no faster than 200; the recordings were the same.
UNPACED_SLICE_PS = 200 * 10**9
#: A silent sensor's promise stays this far (event time) within the newest row sent to its receiver,
#: half the receivers' default ``promise_ahead_ms`` (rows on other connections may still be on their way).
PROMISE_AHEAD_PS = DEFAULT_PROMISE_AHEAD_MS * 10**9 // 2
#: A silent sensor whose promise cannot move (its next row is not due yet) says it again after this much
#: wall time: its receiver must not take it for idle and promise for it, which races its next rows. Well
#: below the receivers' default ``idle_after_ms``.
PROMISE_REPEAT_S = DEFAULT_IDLE_AFTER_MS / 1000 / 5


class SimulateError(Exception):
    """The simulation cannot start (bad data folder, no WTT master, ...)."""


@dataclass
class SimulateOptions:
    workflow: Workflow
    data_dir: Path
    sensors: list[str] | None = None  # stream names or bare sensor ids; None = every file + INTERRUPTIONS
    #: (K, N): of the selected sensors, only every N-th by name from the K-th, INTERRUPTIONS with K = 0; the
    #: origin and the half-time break still come from every file, so N simulators on one WTT clock keep one pace.
    share: tuple[int, int] | None = None
    speedup: float = 1.0  # 0 = unpaced
    start_at_ms: int | None = None  # epoch ms on the provider's clock; None = right after connecting
    skip_halftime: bool = False
    halftime: tuple[int, int] = (HALF1[1], HALF2[0])  # at most this break; the data's own can be longer
    from_ts: int | None = None
    to_ts: int | None = None
    impair: ImpairProfile | None = None
    clock: TimeProvider = field(default_factory=LocalTime)
    wtt_master: Address | None = None
    wtt_slave: Address | None = None
    wtt_sync_timeout_s: float = 10.0
    send_log: Path | None = None
    check_period_ms: float = 10.0
    progress: bool = False
    progress_out: TextIO | None = None
    connect_timeout_s: float = CONNECT_TIMEOUT_S  # one connection attempt
    give_up_s: float = GIVE_UP_S  # unpaced only: how long to wait for an unreachable receiver
    lead_ms: float = 50.0  # start this long after connecting when no start_at is given
    stop: asyncio.Event | None = None  # set to end the simulation early (Ctrl-C)
    #: Waits while the workflow is behind (`simulator/backpressure.py`); None: the feed keeps its pace and a
    #: workflow that cannot keep up loses what its buffers overwrite.
    brake: FeedBrake | None = None


@dataclass
class StreamStats:
    receiver: str | None = None
    sent: int = 0
    lost_impairment: int = 0
    lost_outage: int = 0
    lost_disconnected: int = 0
    skipped: int = 0
    malformed: int = 0
    writes: int = 0
    connects: int = 0
    connect_failures: int = 0
    last_ts: int | None = None
    promises: int = 0  # promises sent while the sensor was silent in event time
    ended: bool = False  # its end promise went out
    error: str | None = None

    @property
    def lost(self) -> int:
        return self.lost_impairment + self.lost_outage + self.lost_disconnected


@dataclass
class Summary:
    streams: dict[str, StreamStats]
    unrouted: list[str]  # streams with data but no receiver in the workflow: skipped, not an error
    errors: list[str]
    elapsed_s: float
    start_ns: int
    origin_ts: int | None
    speedup: float
    wtt: dict[str, Any] | None = None
    no_data: list[str] = field(default_factory=list)  # routed sensors without data: promised ended at the start
    event_s: float = 0.0  # event time fed, from the origin to the newest row sent (a skipped break left out)
    held: dict[str, Any] | None = None  # how long the back-pressure brake held the feed, when it had one

    @property
    def sent(self) -> int:
        return sum(s.sent for s in self.streams.values())

    @property
    def lost(self) -> int:
        return sum(s.lost for s in self.streams.values())

    def as_dict(self) -> dict[str, Any]:
        streams = {}
        for name, s in self.streams.items():
            streams[name] = {
                "receiver": s.receiver, "sent": s.sent, "lost": s.lost,
                "lost_impairment": s.lost_impairment, "lost_outage": s.lost_outage,
                "lost_disconnected": s.lost_disconnected, "skipped": s.skipped, "malformed": s.malformed,
                "writes": s.writes, "connects": s.connects, "connect_failures": s.connect_failures,
                "last_ts": s.last_ts, "promises": s.promises, "ended": s.ended, "error": s.error,
            }
        return {
            "status": "ok" if not self.errors else "errors",
            "sent": self.sent,
            "lost": self.lost,
            "elapsed_s": round(self.elapsed_s, 3),
            "rate_rows_per_s": round(self.sent / self.elapsed_s, 1) if self.elapsed_s > 0 else None,
            "speedup": self.speedup,
            "event_s": round(self.event_s, 3),
            # how fast event time went by, stalls included: what a user waits for, against --speedup
            "achieved_speedup": round(self.event_s / self.elapsed_s, 3) if self.elapsed_s > 0 else None,
            "held": self.held,
            "start_ns": self.start_ns,
            "origin_ts": self.origin_ts,
            "unrouted": self.unrouted,
            "no_data": self.no_data,
            "errors": self.errors,
            "wtt": self.wtt,
            "streams": streams,
        }


class SendLog:
    """CSV ``stream,ts,send_ns`` per sent row: the sensor side of the query-delay metric."""

    def __init__(self, path: Path) -> None:
        self._file = open(path, "w", buffering=1 << 20)  # noqa: SIM115 (closed by close())
        self._file.write("stream,ts,send_ns\n")

    def record(self, stream: str, ts: list[int], send_ns: int) -> None:
        prefix, suffix = stream + ",", f",{send_ns}\n"
        self._file.write("".join([prefix + str(t) + suffix for t in ts]))

    def close(self) -> None:
        self._file.close()


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


class Pacer:
    """Check-period ticks on the provider's clock, relative to the common start.

    With a ``brake`` (`simulator/backpressure.py`) a tick waits while the workflow is behind, and the time
    waited is taken out of the schedule: after a stall the feed goes on where it stopped, at its pace.
    """

    def __init__(self, clock: TimeProvider, start_ns: int, check_ns: int, brake: FeedBrake | None = None) -> None:
        self.clock, self.start_ns, self.check_ns = clock, start_ns, check_ns
        self.brake = brake
        self.paused_ns = 0
        self._pausing = asyncio.Lock()  # one sensor measures a stall; the others wait behind it

    def elapsed_ns(self) -> int:
        """Replay time: since the start, less the time the brake held the feed."""
        return self.clock.now_ns() - self.start_ns - self.paused_ns

    async def hold_while_braked(self) -> None:
        if self.brake is None or not self.brake.engaged:
            return
        async with self._pausing:
            if self.brake.engaged:
                self.paused_ns += int(await self.brake.released() * 1e9)

    async def wait_start(self) -> None:
        # Re-read the clock every half second at most: a WTT slave may still adjust it.
        left = self.start_ns - self.clock.now_ns()
        while left > 0:
            await asyncio.sleep(min(left / 1e9, 0.5))
            left = self.start_ns - self.clock.now_ns()

    async def tick(self, last_ns: int) -> int:
        """Sleep to the next check after ``last_ns``; returns ns since the start (never less than before)."""
        target = (last_ns // self.check_ns + 1) * self.check_ns
        now = self.elapsed_ns()
        if target > now:
            await asyncio.sleep((target - now) / 1e9)
        await self.hold_while_braked()
        return max(self.elapsed_ns(), last_ns)


class EventTimeGate:
    """Unpaced replay in lockstep: no sensor sends past ``limit_ts`` until all have reached it.

    Without it, every sensor would race through its own file and streams would
    drift apart by minutes of event time, which no ordering unit should have to
    absorb. With it the disorder stays within one slice of event time.

    A skipped half-time break (``gap``, as in `Timeline`) is stepped over in one
    round: walked through in slices, its ~40 minutes took ~46,000 rounds of every
    sensor, and a full game's replay stalled there for minutes.
    """

    def __init__(self, origin_ts: int, slice_ps: int, participants: int,
                 gap: tuple[int, int] | None = None) -> None:
        self.slice_ps = slice_ps
        self.gap = gap
        self.limit_ts = self._past_gap(origin_ts + slice_ps)
        self._participants = participants
        self._waiting = 0
        #: Set when the round's last sensor arrives; each round has its own (no lock: the loop runs one at a time).
        self._round_over = asyncio.Event()

    async def arrive(self, finished: bool) -> None:
        """Report that this sensor sent everything up to the limit (or has nothing left)."""
        if finished:
            self._participants -= 1
        else:
            self._waiting += 1
        if self._waiting >= self._participants:
            self.limit_ts = self._past_gap(self.limit_ts + self.slice_ps)
            self._waiting = 0
            over, self._round_over = self._round_over, asyncio.Event()
            over.set()
        elif not finished:
            await self._round_over.wait()

    def _past_gap(self, limit_ts: int) -> int:
        """``limit_ts``, or the end of the skipped break when it falls inside it (rows at the end are kept)."""
        if self.gap is not None and self.gap[0] < limit_ts < self.gap[1]:
            return self.gap[1]
        return limit_ts


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


class Progress:
    """Event time fed so far, as a bar with ETA on a terminal (`pan/util/console.py`); nothing off a terminal."""

    def __init__(self, runners: list[SensorRunner], timeline: Timeline, out: TextIO, end_ts: int | None) -> None:
        self.runners, self.timeline, self.out, self.end_ts = runners, timeline, out, end_ts

    async def run(self) -> None:
        if not console.interactive(self.out):
            return
        origin = self.timeline.origin_ts
        total_s = max(0.0, (self.end_ts - origin) / PS_PER_S) if self.end_ts is not None else None
        with console.progress_bar("simulate", round(total_s, 1) if total_s is not None else None,
                                  unit="s of event time") as bar:
            while True:
                await asyncio.sleep(0.5)
                limits = [r.limit_ts for r in self.runners if r.limit_ts is not None]
                reached = (max(limits) - origin) / PS_PER_S if limits else 0.0
                if total_s is not None:
                    reached = min(reached, total_s)
                sent = sum(r.stats.sent for r in self.runners)
                lost = sum(r.stats.lost for r in self.runners)
                bar.update(round(reached, 1), description=f"simulate: {sent:,} rows sent, {lost:,} lost")


def _select(data_dir: Path, wanted: list[str] | None) -> tuple[dict[str, Path], bool, list[str]]:
    """(sensor files to replay, whether to feed INTERRUPTIONS, errors)."""
    files = sensor_files(data_dir)
    has_interruptions = (data_dir / INTERRUPTIONS_FILE).is_file()
    if wanted is None:
        return files, has_interruptions, []
    chosen: dict[str, Path] = {}
    errors = []
    feed_interruptions = False
    for name in wanted:
        stream = f"SENSOR{name}" if name.isdigit() else name
        if stream == INTERRUPTIONS_STREAM:
            feed_interruptions = has_interruptions
            if not has_interruptions:
                errors.append(f"{INTERRUPTIONS_STREAM}: no {INTERRUPTIONS_FILE} in {data_dir}")
        elif stream in files:
            chosen[stream] = files[stream]
        else:
            errors.append(f"{stream}: no file {stream}.csv in {data_dir}")
    return chosen, feed_interruptions, errors


def _share(files: dict[str, Path], interruptions: bool, k: int, n: int) -> tuple[dict[str, Path], bool]:
    """The K-th of N shares of ``files``, dealt round robin in name order; INTERRUPTIONS goes with share 0."""
    names = sorted(files)
    return {name: files[name] for name in names[k::n]}, interruptions and k == 0


def _routed_sensors_without_data(workflow: Workflow, files: dict[str, Path]) -> list[str]:
    """Sensors the workflow receives that this data set never sends (e.g. a ball not used in it)."""
    routed = [stream for spec in workflow.workers for stream in inter_pan_inputs(spec)]
    return [stream for stream in routed if stream.startswith("SENSOR") and stream not in files]


async def _promise_no_data(workflow: Workflow, streams: list[str], timeout_s: float) -> list[str]:
    """Tell each receiver that these sensors will send nothing (errors are reported, never fatal).

    Without the promise, ordering units downstream would wait for them until
    the receiver declared them idle (its ``idle_after_ms``), a wall-clock rule
    a replay must never depend on. One connection per receiver carries all its promises.
    """
    by_receiver: dict[tuple[str, int], list[str]] = {}
    for stream in streams:
        spec = workflow.ingest_receiver(stream)
        port = None if spec is None else ingest_port(spec)
        assert spec is not None and port is not None
        by_receiver.setdefault((spec.host, port), []).append(stream)
    errors = []
    for (host, port), promised in by_receiver.items():
        try:
            await send_lines(host, port, [promise_line(stream) for stream in promised], timeout_s=timeout_s)
        except (OSError, TimeoutError) as exc:
            errors.append(f"{', '.join(promised)}: no-data promise to {host}:{port} failed: {exc}")
    return errors


async def _start_clock(opts: SimulateOptions) -> tuple[TimeProvider, WTTMaster | WTTSlaveTime | None]:
    if opts.wtt_master is not None:
        master = WTTMaster(*opts.wtt_master, clock=opts.clock)
        await master.start()
        return master, master
    if opts.wtt_slave is not None:
        slave = WTTSlaveTime(opts.wtt_slave, clock=opts.clock)
        await slave.start()
        if not await slave.wait_synced(opts.wtt_sync_timeout_s):
            await slave.stop()
            host, port = opts.wtt_slave
            raise SimulateError(f"no time from WTT master {host}:{port} within {opts.wtt_sync_timeout_s} s")
        return slave, slave
    return opts.clock, None


def interruptions_source(data_dir: Path, **filters: object) -> RowSource:
    """The INTERRUPTIONS stream of a split folder as fed: its spans' begin and end events, and a heartbeat every
    ``HEARTBEAT_PS`` over the sensor data's span."""
    data_files = sensor_files(data_dir)
    span = (first_ts(data_dir, data_files), last_ts(data_dir, data_files))
    beat = (span[0], span[1], HEARTBEAT_PS) if None not in span else None
    lines = interruption_lines(data_dir / INTERRUPTIONS_FILE, beat)  # type: ignore[arg-type]
    return RowSource(INTERRUPTIONS_STREAM, iter([b"".join(lines)] if lines else []), json_lines=True, **filters)


async def simulate(opts: SimulateOptions) -> Summary:
    """Replay the selected streams of ``opts.data_dir`` into ``opts.workflow``; returns what happened."""
    if opts.speedup < 0:
        raise SimulateError("speedup must be >= 0")
    if not opts.data_dir.is_dir():
        raise SimulateError(f"data folder not found: {opts.data_dir}")
    files, feed_interruptions, errors = _select(opts.data_dir, opts.sensors)
    every_file = files
    if opts.share is not None:
        files, feed_interruptions = _share(files, feed_interruptions, *opts.share)
    origin = first_ts(opts.data_dir, sensor_files(opts.data_dir))
    if opts.from_ts is not None:
        origin = opts.from_ts if origin is None else max(origin, opts.from_ts)
    gap = halftime_break(sensor_files(opts.data_dir), *opts.halftime) if opts.skip_halftime else None
    filters = {"lo": opts.from_ts, "hi": opts.to_ts, "gap": gap}

    sources: dict[str, RowSource] = {s: RowSource.from_file(s, p, **filters) for s, p in files.items()}
    if feed_interruptions:
        sources[INTERRUPTIONS_STREAM] = interruptions_source(opts.data_dir, **filters)
        if origin is None:
            origin = sources[INTERRUPTIONS_STREAM].peek_ts()
    if origin is None:
        origin = 0
    timeline = Timeline(origin, opts.speedup, gap)
    span_ns = int(3 * 3600 * 1e9 / (opts.speedup or 1.0))  # bounds how early a drifting clock can send

    clock, wtt = await _start_clock(opts)
    send_log = SendLog(opts.send_log) if opts.send_log is not None else None
    streams: dict[str, StreamStats] = {}
    unrouted: list[str] = []
    runners: list[SensorRunner] = []
    frontier: dict[str, int] = {}
    for stream, source in sources.items():
        spec = opts.workflow.ingest_receiver(stream)
        port = None if spec is None else ingest_port(spec)
        if spec is None or port is None:
            unrouted.append(stream)
            continue
        stats = StreamStats(receiver=f"{spec.host}:{port}")
        streams[stream] = stats
        link = Link(stream, spec.host, port, stats, opts.connect_timeout_s)
        params = opts.impair.for_stream(stream) if opts.impair is not None else None
        impairment = None
        if params is not None and opts.impair is not None:
            sid = int(stream.removeprefix("SENSOR"))
            impairment = SensorImpairment(params, opts.impair.seed, sid, timeline.due_ns, origin, span_ns)
        runners.append(SensorRunner(stream, source, link, stats, timeline, impairment, opts, send_log, frontier))
    if unrouted:
        log.warning("no receiver in workflow %r for %s: skipped", opts.workflow.name, ", ".join(unrouted))
    # Sensors the workflow routes but the data lacks are promised ended once: by the only simulator, or share 0.
    first_share = opts.share is None or opts.share[0] == 0
    no_data = _routed_sensors_without_data(opts.workflow, every_file) if opts.sensors is None and first_share else []

    progress_task = None
    started_mono = time.monotonic()
    start_ns = clock.now_ns()
    braking = contextlib.AsyncExitStack()
    try:
        await asyncio.gather(*(r.link.ensure(force=True) for r in runners))
        start_ns = opts.start_at_ms * 1_000_000 if opts.start_at_ms is not None else (
            clock.now_ns() + int(opts.lead_ms * 1e6))
        if start_ns < clock.now_ns() - 1_000_000_000:
            log.warning("start time lies %.1f s in the past: catching up", (clock.now_ns() - start_ns) / 1e9)
        pacer = Pacer(clock, start_ns, max(1, int(opts.check_period_ms * 1e6)), opts.brake)
        if opts.brake is not None:
            await braking.enter_async_context(opts.brake)
        await pacer.wait_start()
        started_mono = time.monotonic()
        if opts.progress:
            end_ts = last_ts(opts.data_dir, files) if files else None
            if end_ts is not None and opts.to_ts is not None:
                end_ts = min(end_ts, opts.to_ts)
            progress = Progress(runners, timeline, opts.progress_out or sys.stderr, end_ts)
            progress_task = asyncio.create_task(progress.run())
        errors += await _promise_no_data(opts.workflow, no_data, opts.connect_timeout_s)
        gate = EventTimeGate(origin, UNPACED_SLICE_PS, len(runners), gap)
        await asyncio.gather(*(r.run(pacer, gate) for r in runners))
    finally:
        elapsed = time.monotonic() - started_mono
        await braking.aclose()
        if progress_task is not None:
            progress_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await progress_task
        for r in runners:
            await r.link.close()
        if send_log is not None:
            send_log.close()
        wtt_status = None
        if isinstance(wtt, WTTSlaveTime):
            wtt_status = {"role": "slave", **wtt.status()}
        elif isinstance(wtt, WTTMaster):
            wtt_status = {"role": "master", "port": wtt.port, "slaves": len(wtt.slaves)}
        if wtt is not None:
            await wtt.stop()
    for name, stats in streams.items():
        if stats.sent == 0 and stats.error:
            errors.append(f"{name}: {stats.error}")
    newest = max((s.last_ts for s in streams.values() if s.last_ts is not None), default=None)
    event_s = 0.0 if newest is None else timeline.due_one(newest) * (opts.speedup or 1.0) / 1e9
    held = None if opts.brake is None else opts.brake.stats.as_dict()
    return Summary(streams, unrouted, errors, elapsed, start_ns, origin, opts.speedup, wtt_status, no_data,
                   event_s, held)
