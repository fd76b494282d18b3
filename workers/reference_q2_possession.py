"""Possession of the batch reference for Q2 (workers/reference_q2.py): BP_<player> and BP_<window>_<team>.

**Possession** (driver, sequential). Who holds the ball is a state machine over
time-ordered events, so it runs in the driver over a reduced event list: every
INTERRUPTIONS event, every hit, and of ACTIVEBALL only the rows that can matter
(exit rows, the first and the last row of every 20 ms bucket, the first row
after each half end). The rows left out are inside the pitch, neither first
nor last of their bucket, and not the first event after a half end: they
change nothing and emit nothing. The ball is *heard* up to the latest
ACTIVEBALL row or hit; the last row of each bucket keeps that exact wherever
it matters (at a bucket's first event, and across a silence, which is longer
than a bucket). Per event: a possession whose half ended, or whose ball has
been silent for more than ``SILENCE_PS`` (1 s), before the event ends,
whichever came first: at the half's end, credited up to it, or at the last
heard row + 1 s, credited up to the last heard row; a counted hit (not while
interrupted) by a new player ends the holder's possession and starts the
hitter's (a repeated hit is a dribble); an exit row or an interruption
``begin`` ends it at its ts. A running possession counts up to the last heard
row (never past the half's end). A player's tuple is emitted when a possession
ends (at the moment it ends), at each counted hit, and at the first event of
each bucket for the holder unless the holder already emitted in that bucket.
The team windows are evaluated at the first event of each bucket, vectorised
(prefix sums over the closed intervals), over game time (the clock stands
still outside the halves, so a window reaches back over the break), and a
team's tuple is emitted when its ``(time_ps, time_percent)`` differs from the
previous bucket's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workers.debs import FIRST_HALF, PLAYERS, PS_PER_MS, SECOND_HALF, TEAMS, WINDOWS

S1, E1 = FIRST_HALF
S2, E2 = SECOND_HALF
BUCKET_PS = 20 * PS_PER_MS
NO_END = 1 << 62
SILENCE_PS = PS_PER_MS * 1000  # a possession ends after this long without active-ball data
BP_FIELDS = ("ts", "player", "time_ps", "hits")
TEAM_FIELDS = ("ts", "team", "time_ps", "time_percent")


def half_end(ts: int) -> int:
    for start, end in (FIRST_HALF, SECOND_HALF):
        if start <= ts <= end:
            return end
    return NO_END


# --- possession -----------------------------------------------------------------------------------

class _Possession:
    """The possession state machine, fed events in input order; collects the outputs."""

    def __init__(self) -> None:
        self.holder: str | None = None
        self.since, self.until, self.interrupted = 0, NO_END, False
        self.heard = 0  # ts of the latest ball row or hit
        self.hits = dict.fromkeys(PLAYERS, 0)
        self.held = dict.fromkeys(PLAYERS, 0)  # time of the holder's finished possessions
        self.intervals: list[list[tuple[int, int]]] = [[] for _ in TEAMS]  # finished, per team, in time order
        self.out: dict[str, list[dict[str, Any]]] = {p: [] for p in PLAYERS}
        self.last_bucket: dict[str, int | None] = dict.fromkeys(PLAYERS)
        self.bucket: int | None = None
        # One entry per bucket (its first event): state after the event, for the team windows.
        self.ticks: dict[str, list[int]] = {k: [] for k in ("ts", "team", "since", "upto", *TEAMS)}

    def end(self, credit: int, at: int, ended: list[tuple[str, int]]) -> None:
        holder = self.holder
        assert holder is not None
        end = max(credit, self.since)
        self.held[holder] += end - self.since
        self.intervals[TEAMS.index(holder[0])].append((self.since, end))
        ended.append((holder, at))
        self.holder = None

    def emit(self, player: str, ts: int) -> None:
        time_ps = self.held[player]
        if player == self.holder:
            time_ps += max(0, min(ts, self.until, self.heard) - self.since)
        self.last_bucket[player] = ts // BUCKET_PS
        self.out[player].append({"ts": ts, "player": player, "time_ps": time_ps, "hits": self.hits[player]})

    def step(self, ts: int, kind: str, value: Any) -> None:
        ended: list[tuple[str, int]] = []
        if self.holder is not None:
            silent = self.heard + SILENCE_PS
            if ts > self.until and self.until <= silent:
                self.end(self.until, self.until, ended)
            elif ts > silent:
                self.end(self.heard, silent, ended)
        hitter = None
        if kind == "hit":
            if not self.interrupted:
                self.heard = max(self.heard, ts)
                self.hits[value] += 1
                hitter = value
                if value != self.holder:
                    if self.holder is not None:
                        self.end(ts, ts, ended)
                    self.holder, self.since, self.until = value, ts, half_end(ts)
        elif kind == "begin":
            if self.holder is not None:
                self.end(ts, ts, ended)
            self.interrupted = True
        elif kind == "end":
            self.interrupted = False
        elif kind == "ball":
            self.heard = max(self.heard, ts)
            if not value and self.holder is not None:
                self.end(ts, ts, ended)  # the exit row
        for player, at in ended:
            self.emit(player, at)
        if hitter is not None:
            self.emit(hitter, ts)
        bucket = ts // BUCKET_PS
        if bucket != self.bucket:
            self.bucket = bucket
            holder = self.holder
            if holder is not None and self.last_bucket[holder] != bucket:
                self.emit(holder, ts)
            tick = self.ticks
            tick["ts"].append(ts)
            tick["team"].append(TEAMS.index(holder[0]) if holder is not None else -1)
            tick["since"].append(self.since)
            tick["upto"].append(min(self.until, self.heard))
            for n, team in enumerate(TEAMS):
                tick[team].append(len(self.intervals[n]))


def possession(events: list[tuple[int, int, Any, str, Any]]
               ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """BP_<player> and BP_<window>_<team> from (ts, input, order, kind, value) events sorted by their first three.

    kind: ``begin``/``end``/``heartbeat`` (input 0), ``hit`` with the player (1), ``ball`` with inside (2).
    """
    state = _Possession()
    for ts, _input, _order, kind, value in events:
        state.step(ts, kind, value)
    return {f"BP_{p}": state.out[p] for p in PLAYERS}, team_windows(state.ticks, state.intervals)


def game_elapsed(ts: np.ndarray) -> np.ndarray:
    """Play elapsed at each ts (ps): the two halves' parts before it; the clock stands still outside play."""
    return np.clip(ts - S1, 0, E1 - S1) + np.clip(ts - S2, 0, E2 - S2)


def team_windows(ticks: dict[str, list[int]], intervals: list[list[tuple[int, int]]]
                 ) -> dict[str, list[dict[str, Any]]]:
    """BP_<window>_<team>: each team's possession time in the window at every tick, emitted when it changes.

    The sliding windows measure game time: every instant is mapped to the play
    elapsed by then (``game_elapsed``), and a window at ``ts`` is the last W of
    that. Closed intervals of a team are disjoint and in time order, so the time
    within ``[lo, g]`` of the first K of them is a prefix-sum difference, minus the
    part of the first interval ending after ``lo`` that lies before ``lo``.
    """
    ts, team, since, upto = (np.array(ticks[k], dtype=np.int64) for k in ("ts", "team", "since", "upto"))
    held_to = np.minimum(ts, upto)
    streams: dict[str, list[dict[str, Any]]] = {}
    for window, length in WINDOWS.items():
        totals = []
        for t in range(len(TEAMS)):
            iv = np.array(intervals[t], dtype=np.int64).reshape(-1, 2)
            count = np.array(ticks[TEAMS[t]], dtype=np.int64)
            if length is None:
                starts, ends = iv[:, 0], iv[:, 1]
                closed = np.concatenate(([0], np.cumsum(ends - starts)))[count]
                current = np.maximum(0, held_to - since)
            else:
                starts, ends = game_elapsed(iv[:, 0]), game_elapsed(iv[:, 1])
                prefix = np.concatenate(([0], np.cumsum(ends - starts)))
                lo = game_elapsed(ts) - length
                first = np.searchsorted(ends, lo, side="right")  # first interval ending after lo
                clip = np.maximum(0, lo - np.append(starts, 0)[first])
                closed = np.where(first < count, prefix[count] - prefix[np.minimum(first, count)] - clip, 0)
                current = np.maximum(0, game_elapsed(held_to) - np.maximum(game_elapsed(since), lo))
            totals.append(closed + np.where(team == t, current, 0))
        both = totals[0] + totals[1]
        for t, name in enumerate(TEAMS):
            safe = np.where(both > 0, both, 1).astype(np.float64)
            percent = np.where(both > 0, totals[t].astype(np.float64) * 100.0 / safe, 0.0)
            changed = np.ones(len(ts), dtype=bool)
            changed[1:] = (totals[t][1:] != totals[t][:-1]) | (percent[1:] != percent[:-1])
            idx = np.flatnonzero(changed)
            streams[f"BP_{window}_{name}"] = [
                {"ts": a, "team": name, "time_ps": b, "time_percent": c}
                for a, b, c in zip(ts[idx].tolist(), totals[t][idx].tolist(), percent[idx].tolist(), strict=True)
            ]
    return streams
