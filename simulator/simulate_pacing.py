"""How a sensor simulation (``simulator/simulate.py``) keeps time: paced ticks, or unpaced rounds in lockstep.

Pacing follows a time provider (local time or WeakTrueTime), so several
simulator processes on several machines replay the same moment of the match
at the same moment. Unpaced, every sensor sends as fast as its receiver takes
it, but no sensor runs more than a slice of event time ahead of the others.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from simulator.clock import TimeProvider

if TYPE_CHECKING:
    from simulator.backpressure import FeedBrake

#: Unpaced sensors advance together in slices of this much event time (`EventTimeGate`). A slice is a write per
#: sensor, and a read at its receiver: 200 ms against 50 made an unpaced 3-peer replay 8% faster end to end with
#: a tenth less driver CPU (5 interleaved each, 2026-11-28: 118,139 against 108,904 rows/s; 2.5 against 2.8 s),
#: 500 ms no faster than 200; the recordings were the same.
UNPACED_SLICE_PS = 200 * 10**9


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
