"""The progress bar of a sensor simulation (``simulator/simulate.py``): event time fed, rows sent and lost."""

from __future__ import annotations

import asyncio
from typing import TextIO

from pan.util import console
from simulator.sensor_runner import SensorRunner
from simulator.sources import Timeline

PS_PER_S = 10**12


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
