"""What a sensor simulation (``simulator/simulate.py``) reports: per stream and in total."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
