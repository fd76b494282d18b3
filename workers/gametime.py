"""Game clock shared by running analysis (Q1), heat maps (Q3) and the possession windows (Q2).

Only play counts: time before kick-off, in the break and after the end is not
game time. The game clock ``g`` (ps) runs from 0 at the first kick-off through
the first half, then continues from the first half's length at the second
kick-off: ``g = ts - start1`` in the first half, ``g = L1 + ts - start2`` in the
second. Both halves last whole seconds (1804 s and 1793 s), so "game second n"
is ``[n s, (n+1) s)`` of ``g`` and never spans the break.

Windows are "the last W of game time" in whole game seconds: per-second buckets
make sliding them exact and cheap.
"""

from __future__ import annotations

from workers.debs import FIRST_HALF, HALVES, PS_PER_S, SECOND_HALF

L1 = FIRST_HALF[1] - FIRST_HALF[0]
L2 = SECOND_HALF[1] - SECOND_HALF[0]
GAME_PS = L1 + L2
GAME_SECONDS = GAME_PS // PS_PER_S
assert L1 % PS_PER_S == 0 and L2 % PS_PER_S == 0, "halves must last whole seconds"

#: Samples further apart than this (ps) leave the time between them uncounted.
MAX_GAP_PS = PS_PER_S

_OFFSETS = ((FIRST_HALF[0], FIRST_HALF[1], FIRST_HALF[0]), (SECOND_HALF[0], SECOND_HALF[1], SECOND_HALF[0] - L1))


def clipped(a: int, b: int) -> list[tuple[int, int, int]]:
    """The play within ``[a, b)`` (ts) as ``(lo, hi, offset)`` parts; ``g = ts - offset``."""
    out: list[tuple[int, int, int]] = []
    if b <= HALVES[0][0] or a >= HALVES[1][1]:
        return out
    for start, end, offset in _OFFSETS:
        lo = a if a > start else start
        hi = b if b < end else end
        if lo < hi:
            out.append((lo, hi, offset))
    return out


def seconds_of(g: int, g_end: int) -> list[tuple[int, int]]:
    """``[g, g_end)`` of the game clock as ``(g_start, g_end)`` pieces cut at game seconds."""
    out: list[tuple[int, int]] = []
    while g < g_end:
        cut = min((g // PS_PER_S + 1) * PS_PER_S, g_end)
        out.append((g, cut))
        g = cut
    return out


def pieces(a: int, b: int) -> list[tuple[int, int]]:
    """The play within ``[a, b)`` (ts) as game-clock ``(g_start, g_end)`` pieces cut at game seconds."""
    out: list[tuple[int, int]] = []
    for lo, hi, offset in clipped(a, b):
        out += seconds_of(lo - offset, hi - offset)
    return out


def ts_of_game(g: int) -> int:
    """Event time of game-clock instant ``g`` (``L1`` maps to the first half's end)."""
    if g <= L1:
        return FIRST_HALF[0] + g
    return SECOND_HALF[0] + g - L1


def played(ts: int) -> int:
    """Game time elapsed at ``ts``: the game clock in play, standing still outside it (0 before kick-off,
    ``L1`` in the break, ``GAME_PS`` after the end). Sliding windows of game time measure with it."""
    if ts <= FIRST_HALF[0]:
        return 0
    if ts <= FIRST_HALF[1]:
        return ts - FIRST_HALF[0]
    if ts <= SECOND_HALF[0]:
        return L1
    if ts <= SECOND_HALF[1]:
        return L1 + ts - SECOND_HALF[0]
    return GAME_PS


def game_of_ts(ts: int) -> int | None:
    """Game clock at ``ts``, or None outside play (half ends count as play)."""
    for start, end, offset in _OFFSETS:
        if start <= ts <= end:
            return ts - offset
    return None
