"""Back-pressure for replays: hold the feed while the workflow has fallen behind.

A replay of recorded data has no reason to lose anything: it can slow the
feed. With ``delivery: lossless`` every reader that must not lose (each
worker input, the replay's recorder) holds its publisher's unread tuples, and
a publisher whose holders lag grows its ring instead of overwriting. Left
alone, a feed faster than the workflow would grow those rings without bound;
``FeedBrake`` watches them through every worker's ``/streams``
(``holders_behind`` of each output) and is *engaged* while some output holds
more unread tuples than ``engage_at`` times its ``buffer_size``, until all are
below ``release_at`` times theirs (read once a second, less often when the
reading itself takes long). The simulator's pacer waits while it is engaged
and shifts its event-time schedule by the wait, so the feed resumes where it
stopped instead of bursting to catch up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from pan.config.specs import Workflow
from pan.config.trust import Trust
from pan.repository.client import http_url
from pan.security.auth import bearer
from pan.security.tls import scheme
from pan.workflow.health import get_json

log = logging.getLogger(__name__)

ENGAGE_AT = 1.0  # unread tuples per buffer_size of the worst output that holds the feed
RELEASE_AT = 0.5  # ... and that lets it go again (hysteresis: no flapping at the threshold)
POLL_S = 1.0
#: A round of polls may take at most this share of the driver's time: on a starved machine (a test runs CPU
#: hogs beside the replay) reading every worker's /streams four times a second took most of what the replay
#: driver got, and the feed crawled.
POLL_SHARE = 0.2
REQUEST_TIMEOUT_S = 10.0
#: A stall this long means something other than load (a worker that stopped reading); the feed goes on, and
#: the holds keep it lossless at the cost of memory.
MAX_STALL_S = 600.0


@dataclass
class BrakeStats:
    engaged: int = 0  # times some output went over the limit
    stalls: int = 0  # times the feed waited (it may have been between two rows, or done, when engaged)
    stalled_s: float = 0.0
    longest_s: float = 0.0
    worst: str = ""  # the output that engaged the brake last, for the report
    unanswered_polls: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"engaged": self.engaged, "stalls": self.stalls, "stalled_s": round(self.stalled_s, 3),
                "longest_stall_s": round(self.longest_s, 3),
                "held_by": self.worst, "unanswered_polls": self.unanswered_polls}


@dataclass
class FeedBrake:
    """Engaged while the workflow's outputs hold too much unread; see the module docstring."""

    workflow: Workflow
    engage_at: float = ENGAGE_AT
    release_at: float = RELEASE_AT
    poll_s: float = POLL_S
    stats: BrakeStats = field(default_factory=BrakeStats)
    engaged: bool = False
    _released: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None
    _behind: dict[str, float] = field(default_factory=dict)  # output -> unread per buffer_size, last answer

    def __post_init__(self) -> None:
        self._released.set()

    async def __aenter__(self) -> FeedBrake:
        self._task = asyncio.create_task(self._watch(), name="feed brake")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._set(False)

    async def released(self) -> float:
        """Wait until the brake is off; returns the seconds waited."""
        if not self.engaged:
            return 0.0
        started = time.monotonic()
        try:
            async with asyncio.timeout(MAX_STALL_S):
                await self._released.wait()
        except TimeoutError:
            log.warning("the feed was held %.0f s by %s; going on (the holds keep the replay lossless)",
                        MAX_STALL_S, self.stats.worst or "?")
            self._set(False)
        waited = time.monotonic() - started
        self.stats.stalls += 1
        self.stats.stalled_s += waited
        if waited > self.stats.longest_s:
            self.stats.longest_s = waited
        return waited

    def update(self, behind: dict[str, float]) -> None:
        """New readings (output -> unread per buffer_size): engage or release with hysteresis."""
        self._behind.update(behind)
        worst = max(self._behind.items(), key=lambda item: item[1], default=("", 0.0))
        if not self.engaged and worst[1] >= self.engage_at:
            self.stats.worst = worst[0]
            self.stats.engaged += 1
            self._set(True)
        elif self.engaged and worst[1] <= self.release_at:
            self._set(False)

    def _set(self, engaged: bool) -> None:
        self.engaged = engaged
        if engaged:
            self._released.clear()
        else:
            self._released.set()

    async def _watch(self) -> None:
        trust = Trust.of(self.workflow)
        tls = trust.client_tls()
        urls = [http_url(w.host, w.port, "/streams", scheme(tls)) for w in self.workflow.workers]
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
        async with aiohttp.ClientSession(timeout=timeout, headers=bearer(trust.token)) as session:
            while True:
                started = time.monotonic()
                answers = await asyncio.gather(*(self._poll(session, url, tls) for url in urls))
                readings: dict[str, float] = {}
                for answer in answers:
                    if answer is None:
                        self.stats.unanswered_polls += 1  # busy or restarting: its last reading stands
                    else:
                        readings.update(answer)
                self.update(readings)
                await asyncio.sleep(max(self.poll_s, (time.monotonic() - started) * (1 / POLL_SHARE - 1)))

    @staticmethod
    async def _poll(session: aiohttp.ClientSession, url: Any, tls: ssl.SSLContext | None) -> dict[str, float] | None:
        answer = await get_json(session, url, tls, ok=(200,))
        return None if answer is None else unread_per_buffer(answer)


def unread_per_buffer(answer: Any) -> dict[str, float]:
    """From a worker's ``/streams`` answer: each output's unread-by-holders tuples per ``buffer_size``."""
    outputs = answer.get("outputs") if isinstance(answer, dict) else None
    if not isinstance(outputs, dict):
        return {}
    readings = {}
    for name, counters in outputs.items():
        if isinstance(counters, dict):
            behind, size = counters.get("holders_behind"), counters.get("buffer_size")
            if isinstance(behind, int) and isinstance(size, int) and size > 0:
                readings[name] = behind / size
    return readings
