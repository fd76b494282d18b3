"""Q1 running analysis on numpy arrays: one player's accepted samples of a batch at once.

The array path of ``workers.running``; the rules are that module's, and the
outputs are the per-event path's, byte for byte:
- steps, speeds and bands: ``sqrt(dx² + dy²) * 1e15 / dt`` and the band
  limits by ``np.searchsorted``, the same float64 operations in the same order;
- a step's counted part: a step lasts at most ``MAX_GAP_PS`` and the break is
  longer, so it overlaps at most one half;
- pieces: a counted part of at most a second spans at most two game seconds;
  ``floor(v * d / 1e9)`` nm each, as integers;
- window sums at an emission: every contribution so far (a running prefix)
  minus those of the game seconds before the window's first (a prefix over
  per-second totals; those seconds are complete by then, as contributions come
  in game-clock order);
- segments: a step continues the segment when its band and start match the
  previous step's band and end; cumulative sums give each step's segment
  distance.
"""

from __future__ import annotations

import numpy as np

from workers.debs import FIRST_HALF, PS_PER_S, SECOND_HALF
from workers.gametime import GAME_SECONDS, L1, MAX_GAP_PS

assert SECOND_HALF[0] - FIRST_HALF[1] > MAX_GAP_PS, "a counted step must never span the break"

LIMITS = np.array((1.0, 11.0, 14.0, 17.0, 24.0))  # workers.running.LIMITS
KEYS = 2 * (len(LIMITS) + 1)  # time per band, then distance per band


class Steps:
    """The counted steps of one player's batch: per step its band, [lo, hi) in ts, game clock end, nm and
    contributions per window key, in sample order (steps outside play are left out)."""

    __slots__ = ("band", "contrib", "g_end", "hi", "lo", "nm", "second", "seconds_ps")

    def __init__(self, ts: np.ndarray, x: np.ndarray, y: np.ndarray, since: np.ndarray, x0: float, y0: float) -> None:
        """``since`` is each sample's previous ts, or -1 where the step from it does not count."""
        px = np.concatenate(([x0], x[:-1]))
        py = np.concatenate(([y0], y[:-1]))
        dx, dy = x - px, y - py
        counted = since >= 0
        dt = np.where(counted, ts - since, 1)
        v = np.sqrt(dx * dx + dy * dy) * 1e15 / dt
        band = np.searchsorted(LIMITS, v * 3.6e-6, side="left")
        lo1, hi1 = np.maximum(since, FIRST_HALF[0]), np.minimum(ts, FIRST_HALF[1])
        lo2, hi2 = np.maximum(since, SECOND_HALF[0]), np.minimum(ts, SECOND_HALF[1])
        in1 = counted & (lo1 < hi1)
        in2 = counted & (lo2 < hi2)
        keep = in1 | in2
        in1, in2 = in1[keep], in2[keep]
        self.lo = np.where(in1, lo1[keep], lo2[keep])
        self.hi = np.where(in1, hi1[keep], hi2[keep])
        offset = np.where(in1, FIRST_HALF[0], SECOND_HALF[0] - L1)
        v, self.band = v[keep], band[keep]
        g = self.lo - offset
        self.g_end = self.hi - offset
        n1 = g // PS_PER_S
        first_end = np.minimum((n1 + 1) * PS_PER_S, self.g_end)
        d1 = first_end - g
        d2 = self.g_end - first_end  # > 0 where the step crosses a game second
        nm1 = np.floor(v * d1 / 1e9).astype(np.int64)
        nm2 = np.where(d2 > 0, np.floor(v * d2 / 1e9), 0).astype(np.int64)
        self.nm = nm1 + nm2
        rows = np.arange(len(v))
        self.contrib = np.zeros((len(v), KEYS), dtype=np.int64)
        self.contrib[rows, self.band] = d1 + d2
        self.contrib[rows, len(LIMITS) + 1 + self.band] = self.nm
        # per game second: (second, key, amount) of every piece, for the per-second totals
        split = d2 > 0
        self.second = (n1, n1[split] + 1)
        self.seconds_ps = ((d1, nm1), (d2[split], nm2[split]), split)

    def add_to_seconds(self, totals: np.ndarray) -> None:
        """Add each piece to ``totals[second, key]``."""
        (d1, nm1), (d2, nm2), split = self.seconds_ps
        n1, n2 = self.second
        distance = len(LIMITS) + 1
        np.add.at(totals, (n1, self.band), d1)
        np.add.at(totals, (n1, distance + self.band), nm1)
        np.add.at(totals, (n2, self.band[split]), d2)
        np.add.at(totals, (n2, distance + self.band[split]), nm2)


def window_sums(prefix: np.ndarray, before: np.ndarray, g_end: np.ndarray, length_s: int | None) -> np.ndarray:
    """Per emission, a window's sums per key: ``prefix`` (every contribution up to it) minus the game seconds
    before ``ceil(g_end / 1 s) - length_s`` (``before[n]``: the sums of seconds ``0..n``; None: the whole game).
    """
    if length_s is None:
        return prefix
    first = -(-g_end // PS_PER_S) - length_s
    if not np.any(first > 0):
        return prefix
    left_out = np.where((first > 0)[:, None], before[np.maximum(first, 1) - 1], 0)
    return prefix - left_out


def seconds_needed(g_end: np.ndarray, lengths_s: list[int]) -> int:
    """How many leading game seconds ``window_sums`` may look up for these emissions and window lengths."""
    if not len(g_end) or not lengths_s:
        return 0
    return max(0, int(-(-int(g_end.max()) // PS_PER_S)) - min(lengths_s))


def new_totals() -> np.ndarray:
    """Per game second and window key, the ps and nm counted."""
    return np.zeros((GAME_SECONDS, KEYS), dtype=np.int64)
