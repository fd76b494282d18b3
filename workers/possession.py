"""Ball possession per player and per team (DESIGN §6, Q2).

Both components read the same three inputs, ``BALLHITS``, ``ACTIVEBALL`` and
``INTERRUPTIONS``, and run the same state machine (``Possession``), so the team
figures are exact interval sums rather than re-derived from rounded player
outputs:

* A hit by player P starts P's possession unless P already has the ball
  (a dribble is one possession); it ends the previous holder's.
* Possession ends when another player hits the ball, at the active ball's exit
  row (the first ACTIVEBALL row outside the pitch), at an interruption
  ``begin``, or at the end of the half it started in.
* While play is interrupted (between ``begin`` and ``end``), hits neither
  start possession nor count; they are counted in ``counters()`` instead.

Ties in ts are resolved by input position (INTERRUPTIONS, BALLHITS,
ACTIVEBALL): an interruption ending at the instant of the restart kick lets
that kick count.

Outputs, "up to 50 Hz": event time is cut into 20 ms buckets; the first event
of a new bucket is an emission point. ``BP_<player>`` is emitted there for the
current holder (unless a hit already put out a value in that bucket), on
every counted hit and when a possession ends.
``BP_<window>_<team>`` is emitted there for every window and team whose value
changed since its last emission; ``time_percent`` is the team's share of the
window's possession time, 0.0 for both teams when nobody had the ball.
"""

from __future__ import annotations

from collections import deque
from typing import Any, ClassVar

from pan.component import register
from pan.ordered import OrderedComponent
from pan.streams import Tuple
from pan.workflow import WorkerSpec
from workers import debs

INPUTS = ["INTERRUPTIONS", "BALLHITS", "ACTIVEBALL"]
BUCKET_PS = 20 * debs.PS_PER_MS
NO_END = 1 << 62


def half_end(ts: int) -> int:
    """End of the half ``ts`` lies in; possession never runs past it."""
    for start, end in debs.HALVES:
        if start <= ts <= end:
            return end
    return NO_END


class Possession:
    """Who has the ball; reports each finished possession to ``on_close``."""

    def __init__(self) -> None:
        self.holder: str | None = None
        self.since = 0
        self.until = NO_END
        self.interrupted = False
        self.hits: dict[str, int] = dict.fromkeys(debs.PLAYERS, 0)
        self.closed: dict[str, int] = dict.fromkeys(debs.PLAYERS, 0)
        self.bad = 0
        self.ignored_hits = 0
        self.closes: list[tuple[str, int, int]] = []  # finished possessions not yet taken by the caller

    def time_of(self, player: str, ts: int) -> int:
        """Possession time of ``player`` up to ``ts``."""
        total = self.closed[player]
        if player == self.holder:
            total += max(0, min(ts, self.until) - self.since)
        return total

    def close(self, ts: int) -> None:
        holder = self.holder
        if holder is None:
            return
        end = max(min(ts, self.until), self.since)
        self.closed[holder] += end - self.since
        self.closes.append((holder, self.since, end))
        self.holder = None

    def step(self, ev: Tuple) -> str | None:
        """Apply one input tuple; returns the player who hit, if a hit counted."""
        try:
            ts = ev["ts"]
            if ts > self.until:
                self.close(self.until)
            if "player" in ev:
                return self.hit(ts, ev["player"])
            if "event" in ev:
                event = ev["event"]
                if event == "begin":
                    self.close(ts)
                    self.interrupted = True
                elif event == "end":
                    self.interrupted = False
                elif event != "heartbeat":  # heartbeats only carry event-time progress
                    self.bad += 1
                return None
            x, y = ev["x"], ev["y"]
            inside = debs.X_MIN <= x <= debs.X_MAX and debs.Y_MIN <= y <= debs.Y_MAX
            if self.holder is not None and not inside:
                self.close(ts)
        except (KeyError, TypeError):
            self.bad += 1
        return None

    def hit(self, ts: int, player: str) -> str | None:
        if player not in self.hits:
            self.bad += 1
            return None
        if self.interrupted:
            self.ignored_hits += 1
            return None
        self.hits[player] += 1
        if player != self.holder:
            self.close(ts)
            self.holder, self.since, self.until = player, ts, half_end(ts)
        return player


class PossessionComponent(OrderedComponent):
    """Shared plumbing: inputs, validation and the event loop around ``Possession``."""

    own_params: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def input_names(cls, spec: WorkerSpec) -> list[str]:
        return list(spec.inputs) if spec.inputs else list(INPUTS)

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self.state = Possession()
        self.bucket = -1

    def process(self, events: list[Tuple]) -> None:
        state = self.state
        for ev in events:
            hitter = state.step(ev)
            ts = ev.get("ts") if isinstance(ev, dict) else None
            if type(ts) is not int:
                continue
            if state.closes:
                self.closed(state.closes)
                state.closes = []
            if hitter is not None:
                self.hit(ts, hitter)
            bucket = ts // BUCKET_PS
            if bucket != self.bucket:
                self.bucket = bucket
                self.tick(ts)
        self.flush()

    def closed(self, closes: list[tuple[str, int, int]]) -> None:
        """Possessions that just ended."""

    def hit(self, ts: int, player: str) -> None:
        """A counted hit."""

    def tick(self, ts: int) -> None:
        """An emission point (first event of a 20 ms bucket)."""

    def flush(self) -> None:
        """End of a batch: write what was collected."""

    def counters(self) -> dict[str, Any]:
        return {**super().counters(), "bad_tuples": self.state.bad, "hits_while_interrupted": self.state.ignored_hits,
                "holder": self.state.holder}


@register
class PlayerPossession(PossessionComponent):
    """``BP_<player>``: ``player, time_ps, hits``."""

    type_name = "player_possession"

    @classmethod
    def main_outputs(cls, spec: WorkerSpec) -> list[str]:
        return [f"BP_{p}" for p in debs.PLAYERS]

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self.pending: dict[str, list[dict[str, Any]]] = {p: [] for p in debs.PLAYERS}
        self.emitted_bucket: dict[str, int] = dict.fromkeys(debs.PLAYERS, -1)

    def emit(self, ts: int, player: str) -> None:
        state = self.state
        self.emitted_bucket[player] = ts // BUCKET_PS
        self.pending[player].append(
            {"ts": ts, "player": player, "time_ps": state.time_of(player, ts), "hits": state.hits[player]}
        )

    def closed(self, closes: list[tuple[str, int, int]]) -> None:
        for player, _start, end in closes:
            self.emit(end, player)

    def hit(self, ts: int, player: str) -> None:
        self.emit(ts, player)

    def tick(self, ts: int) -> None:
        holder = self.state.holder
        if holder is not None and self.emitted_bucket[holder] != ts // BUCKET_PS:
            self.emit(ts, holder)

    def flush(self) -> None:
        for player, items in self.pending.items():
            if items:
                self.ctx.outputs[f"BP_{player}"].extend(items)
                items.clear()


class WindowSum:
    """Closed possession intervals of one team that may still overlap a sliding window."""

    def __init__(self, length: int | None) -> None:
        self.length = length
        self.intervals: deque[tuple[int, int]] = deque()
        self.total = 0

    def add(self, start: int, end: int) -> None:
        self.total += end - start
        if self.length is not None:
            self.intervals.append((start, end))

    def value(self, ts: int) -> int:
        """Closed possession time within [ts - length, ts]; ts never decreases."""
        if self.length is None:
            return self.total
        lo = ts - self.length
        intervals = self.intervals
        while intervals and intervals[0][1] <= lo:
            start, end = intervals.popleft()
            self.total -= end - start
        total = self.total
        if intervals and intervals[0][0] < lo:
            total -= lo - intervals[0][0]
        return total


@register
class TeamPossession(PossessionComponent):
    """``BP_<window>_<team>``: ``team, time_ps, time_percent`` for each window in ``debs.WINDOWS``."""

    type_name = "team_possession"

    @classmethod
    def main_outputs(cls, spec: WorkerSpec) -> list[str]:
        return [f"BP_{w}_{t}" for w in debs.WINDOWS for t in debs.TEAMS]

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self.sums = {(w, t): WindowSum(length) for w, length in debs.WINDOWS.items() for t in debs.TEAMS}
        self.last: dict[tuple[str, str], tuple[int, float] | None] = dict.fromkeys(self.sums)
        self.pending: dict[tuple[str, str], list[dict[str, Any]]] = {key: [] for key in self.sums}

    def closed(self, closes: list[tuple[str, int, int]]) -> None:
        for player, start, end in closes:
            team = debs.team_of(player)
            for w in debs.WINDOWS:
                self.sums[(w, team)].add(start, end)

    def tick(self, ts: int) -> None:
        state = self.state
        holder_team = debs.team_of(state.holder) if state.holder is not None else None
        for w, length in debs.WINDOWS.items():
            times = {}
            for t in debs.TEAMS:
                total = self.sums[(w, t)].value(ts)
                if t == holder_team:
                    start = state.since if length is None else max(state.since, ts - length)
                    total += max(0, min(ts, state.until) - start)
                times[t] = total
            both = sum(times.values())
            for t, total in times.items():
                percent = total * 100.0 / both if both else 0.0
                key = (w, t)
                if self.last[key] != (total, percent):
                    self.last[key] = (total, percent)
                    self.pending[key].append({"ts": ts, "team": t, "time_ps": total, "time_percent": percent})

    def flush(self) -> None:
        for (w, t), items in self.pending.items():
            if items:
                self.ctx.outputs[f"BP_{w}_{t}"].extend(items)
                items.clear()
