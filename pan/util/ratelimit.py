"""Rate-limited warnings: a hostile or broken sender must not flood the log.

At most ``burst`` messages are logged per ``window_s``; the rest of the window
is counted, and the first message of the next window says how many were
suppressed.  Unlike "log the first N, then never again", a problem that
starts an hour into a run is still logged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

#: Defaults: ten lines per ten seconds per limiter.
LOG_BURST = 10
LOG_WINDOW_S = 10.0


class RateLimitedLog:
    def __init__(
        self,
        logger: logging.Logger,
        burst: int = LOG_BURST,
        window_s: float = LOG_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.burst = burst
        self.window_s = window_s
        self._clock = clock
        self._window_start = -float("inf")
        self._logged = 0
        self.suppressed = 0  # in the current window
        self.suppressed_total = 0

    def warning(self, message: str, *args: object) -> bool:
        """Log ``message % args`` unless this window's budget is spent; returns whether it was logged."""
        now = self._clock()
        if now - self._window_start >= self.window_s:
            if self.suppressed:
                self.logger.warning("%d similar messages suppressed in the last %.0f s", self.suppressed, self.window_s)
            self._window_start, self._logged, self.suppressed = now, 0, 0
        if self._logged >= self.burst:
            self.suppressed += 1
            self.suppressed_total += 1
            return False
        self._logged += 1
        self.logger.warning(message, *args)
        return True
