"""Ball possession per player and per team (DESIGN §6, Q2).

Both components read the same three inputs, ``BALLHITS``, ``ACTIVEBALL`` and
``INTERRUPTIONS``, and run the same state machine (``Possession``), so the team
figures are exact interval sums rather than re-derived from rounded player
outputs:

* A hit by player P starts P's possession unless P already has the ball
  (a dribble is one possession); it ends the previous holder's.
* Possession ends when another player hits the ball, at the active ball's exit
  row (the first ACTIVEBALL row outside the pitch), at an interruption
  ``begin``, at the end of the half it started in, or when the active ball
  has been silent for more than ``BALL_SILENCE_PS`` (1 s): no ACTIVEBALL row
  (and no hit) for longer than that. The ball sends at 2000 Hz and real
  sensor dropouts last 50-500 ms, so a dropout never ends a possession, while
  a ball-data gap (the real file has none for the last ~159 s of the first
  half) does.
* Possession time counts only what the ball data shows: a possession ended
  by silence is credited up to the ball's last row before the silence, never
  into it; one ended by a hit, an exit row, an interruption or the half's end
  is credited up to that moment. While a possession runs, its reported time
  reaches the latest ball row (or hit), so it stalls during a dropout and
  catches up when the ball is heard again; it never decreases.
* While play is interrupted (between ``begin`` and ``end``), hits neither
  start possession nor count; they are counted in ``counters()`` instead.

Ties in ts are resolved by input position (INTERRUPTIONS, BALLHITS,
ACTIVEBALL): an interruption ending at the instant of the restart kick lets
that kick count.

``policy: nfp`` (docs/policies.md): a finished possession is *uncertain* when
lost input could have changed it: a doubt marker from the hit detector (a hit
may be missing or withheld) within it, a step of the active ball's ts of
several ball periods while the ball was in the pitch, or a reported loss
(``input_lost``). Each possession is judged once the ball data has passed its
end. ``BP_<player>`` tuples then also carry ``certain_ps`` and
``uncertain_ps``: the player's judged possessions split by that verdict
(``time_ps`` stays the best-effort figure). Team windows are not split.

Outputs, "up to 50 Hz": event time is cut into 20 ms buckets; the first event
of a new bucket is an emission point. ``BP_<player>`` is emitted there for the
current holder (unless a hit already put out a value in that bucket), on
every counted hit and when a possession ends (at the moment it ends: the
event's ts, the half's end, or the last ball row + 1 s for silence).
``BP_<window>_<team>`` is emitted there for every window and team whose value
changed since its last emission; ``time_percent`` is the team's share of the
window's possession time, 0.0 for both teams when nobody had the ball.
Windows count game time, as Q1 and Q3 do (``workers.gametime.played``): at
``ts`` the W window holds the possession within the last W of play before
``ts``, so early in the second half the 20 min window reaches back over the
break into the first half's last minutes. ``wholeGame`` is every possession.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pan.buffers.tuples import Tuple
from pan.components.catalog import register
from pan.components.ordered import OrderedComponent
from pan.config.specs import WorkerSpec
from workers import debs
from workers.gametime import played
from workers.nfp import BALL_GAP_PS, Doubts
from workers.windows import Window, Windows

INPUTS = ["INTERRUPTIONS", "BALLHITS", "ACTIVEBALL"]
BUCKET_PS = 20 * debs.PS_PER_MS
NO_END = 1 << 62
#: A possession ends when the active ball sends nothing for longer than this (ps).
BALL_SILENCE_PS = debs.PS_PER_S


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
        self.heard = 0  # ts of the latest ACTIVEBALL row or hit: the ball data reaches this far
        self.interrupted = False
        self.hits: dict[str, int] = dict.fromkeys(debs.PLAYERS, 0)
        self.closed: dict[str, int] = dict.fromkeys(debs.PLAYERS, 0)
        self.bad = 0
        self.ignored_hits = 0
        #: finished possessions not yet taken by the caller: (player, start, credited end, moment it ended)
        self.closes: list[tuple[str, int, int, int]] = []

    def credited_until(self) -> int:
        """The running possession counts up to here: the latest ball data, never past the half's end."""
        return min(self.until, self.heard)

    def time_of(self, player: str, ts: int) -> int:
        """Possession time of ``player`` up to ``ts``."""
        total = self.closed[player]
        if player == self.holder:
            total += max(0, min(ts, self.credited_until()) - self.since)
        return total

    def close(self, end: int, at: int) -> None:
        """End the running possession at ``at``, credited up to ``end``."""
        holder = self.holder
        if holder is None:
            return
        end = max(end, self.since)
        self.closed[holder] += end - self.since
        self.closes.append((holder, self.since, end, at))
        self.holder = None

    def expire(self, ts: int) -> None:
        """Before an event at ``ts``: end a possession whose half is over or whose ball went silent."""
        if self.holder is None:
            return
        silent_at = self.heard + BALL_SILENCE_PS
        if ts > self.until and self.until <= silent_at:
            self.close(self.until, self.until)
        elif ts > silent_at:
            self.close(self.heard, silent_at)  # the silence itself is never credited

    def step(self, ev: Tuple) -> str | None:
        """Apply one input tuple; returns the player who hit, if a hit counted."""
        try:
            ts = ev["ts"]
            if type(ts) is not int:
                raise TypeError("ts must be an int")
            self.expire(ts)
            if "player" in ev:
                return self.hit(ts, ev["player"])
            if "event" in ev:
                event = ev["event"]
                if event == "begin":
                    self.close(ts, ts)
                    self.interrupted = True
                elif event == "end":
                    self.interrupted = False
                elif event != "heartbeat":  # heartbeats only carry event-time progress
                    self.bad += 1
                return None
            x, y = ev["x"], ev["y"]
            inside = debs.in_pitch(x, y)
            if ts > self.heard:
                self.heard = ts
            if self.holder is not None and not inside:
                self.close(ts, ts)
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
        self.heard = max(self.heard, ts)  # a hit is detected on a ball row of its ts
        self.hits[player] += 1
        if player != self.holder:
            self.close(ts, ts)
            self.holder, self.since, self.until = player, ts, half_end(ts)
        return player


class PossessionComponent(OrderedComponent):
    """Shared plumbing: inputs, validation and the event loop around ``Possession``."""

    own_params: ClassVar[tuple[str, ...]] = ()
    #: State of every possession component (a speculative ordering unit copies it, docs/ordering.md).
    STATE: ClassVar[tuple[str, ...]] = ("state", "bucket", "doubts", "ball_last", "unjudged", "intervals", "judged_ps")

    @classmethod
    def input_names(cls, spec: WorkerSpec) -> list[str]:
        return list(spec.inputs) if spec.inputs else list(INPUTS)

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self.state = Possession()
        self.bucket = -1
        self.nfp = self.policy == "nfp"
        self.doubts = Doubts()
        self.ball_last: tuple[int, bool] | None = None  # ts and inside of the latest ACTIVEBALL row
        self.unjudged: list[tuple[str, int, int, int]] = []
        #: finished possessions (player, start, credited end, certain); all certain under best_effort
        self.intervals: list[tuple[str, int, int, bool]] = []
        self.judged_ps: dict[bool, dict[str, int]] = {v: dict.fromkeys(debs.PLAYERS, 0) for v in (True, False)}

    def process(self, events: list[Tuple]) -> None:
        state = self.state
        for ev in events:
            if isinstance(ev, dict) and "doubt" in ev:  # from a hit detector under nfp: not a hit
                if self.nfp and type(ev.get("ts")) is int:
                    self.doubts.add(ev["ts"], ev["ts"])
                continue
            if self.nfp:
                self.watch(ev)
            hitter = state.step(ev)
            ts = ev.get("ts") if isinstance(ev, dict) else None
            if type(ts) is not int:
                continue
            if state.closes:
                if self.nfp:
                    self.unjudged += state.closes
                else:
                    self.intervals += [(p, start, end, True) for p, start, end, _at in state.closes]
                self.closed(state.closes)
                state.closes = []
            if hitter is not None:
                self.hit(ts, hitter)
            bucket = ts // BUCKET_PS
            if bucket != self.bucket:
                self.bucket = bucket
                self.tick(ts)
        self.flush()

    def closed(self, closes: list[tuple[str, int, int, int]]) -> None:
        """Possessions that just ended: (player, start, credited end, moment it ended)."""

    def watch(self, ev: Tuple) -> None:
        """nfp: an ACTIVEBALL row; a long ts step while the ball was in play is a doubt; judge what it passed."""
        try:
            ts, x, y = ev["ts"], ev["x"], ev["y"]
            if "player" in ev or "event" in ev or type(ts) is not int:
                return
            inside = debs.in_pitch(x, y)
        except (KeyError, TypeError):
            return
        last = self.ball_last
        if last is not None and last[1] and ts - last[0] > BALL_GAP_PS and debs.half_of(last[0]) == debs.half_of(ts):
            self.doubts.add(last[0], ts)
        self.ball_last = (ts, inside)
        self.judge(ts)

    def judge(self, upto: int) -> None:
        """Possessions that ended before ``upto`` (ball data reached past them) are certain or not."""
        waiting = []
        for player, start, end, at in self.unjudged:
            if end >= upto:
                waiting.append((player, start, end, at))
                continue
            certain = not self.doubts.touches(start, end)
            self.intervals.append((player, start, end, certain))
            self.judged_ps[certain][player] += end - start
        self.unjudged = waiting
        oldest = min([start for _, start, _, _ in waiting] + [upto], default=upto)
        if self.state.holder is not None:
            oldest = min(oldest, self.state.since)
        self.doubts.forget_before(oldest)

    def input_lost(self, stream: str | None, count: int, ts_from: int | None, ts_to: int | None) -> None:
        super().input_lost(stream, count, ts_from, ts_to)
        if self.nfp:
            self.doubts.add(ts_from, ts_to)

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
    state_attributes = (*PossessionComponent.STATE, "pending", "emitted_bucket")

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
        item = {"ts": ts, "player": player, "time_ps": state.time_of(player, ts), "hits": state.hits[player]}
        if self.nfp:
            item["certain_ps"] = self.judged_ps[True][player]
            item["uncertain_ps"] = self.judged_ps[False][player]
        self.pending[player].append(item)

    def closed(self, closes: list[tuple[str, int, int, int]]) -> None:
        for player, _start, _end, at in closes:
            self.emit(at, player)

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


#: The windows that slide (all but ``wholeGame``), in ``debs.WINDOWS`` order.
SLIDING: dict[str, int] = {w: length for w, length in debs.WINDOWS.items() if length is not None}


def finished_time(window: Window[str], team: str, now: int) -> int:
    """The team's finished possession time inside a sliding ``window`` slid to game time ``now``.

    A window's buckets are possessions, so the oldest may have begun before the window: only
    its part inside counts.
    """
    assert window.length is not None
    total = window.sums.get(team, 0)
    oldest, lowest = window.oldest(), now - window.length
    if oldest is not None and oldest.start < lowest:
        total -= lowest - oldest.start
    return total


@register
class TeamPossession(PossessionComponent):
    """``BP_<window>_<team>``: ``team, time_ps, time_percent`` for each window in ``debs.WINDOWS``."""

    type_name = "team_possession"
    state_attributes = (*PossessionComponent.STATE, "windows", "window_of", "whole_game", "last", "pending")

    @classmethod
    def main_outputs(cls, spec: WorkerSpec) -> list[str]:
        return [f"BP_{w}_{t}" for w in debs.WINDOWS for t in debs.TEAMS]

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        #: per team: its finished possessions in game time (``played``), one bucket each, in the SLIDING windows
        self.windows: dict[str, Windows[str]] = {t: Windows(list(SLIDING.values())) for t in debs.TEAMS}
        self.window_of = {(w, t): self.windows[t][i] for t in debs.TEAMS for i, w in enumerate(SLIDING)}
        #: per team: the time of all its finished possessions (``wholeGame`` counts event time)
        self.whole_game: dict[str, int] = dict.fromkeys(debs.TEAMS, 0)
        keys = [(w, t) for w in debs.WINDOWS for t in debs.TEAMS]
        self.last: dict[tuple[str, str], tuple[int, float] | None] = dict.fromkeys(keys)
        self.pending: dict[tuple[str, str], list[dict[str, Any]]] = {key: [] for key in keys}

    def closed(self, closes: list[tuple[str, int, int, int]]) -> None:
        for player, start, end, _at in closes:
            team = debs.team_of(player)
            self.whole_game[team] += end - start
            windows = self.windows[team]
            windows.open(played(start), played(end))
            windows.add(team, played(end) - played(start))

    def tick(self, ts: int) -> None:
        state = self.state
        holder_team = debs.team_of(state.holder) if state.holder is not None else None
        upto = min(ts, state.credited_until())
        now = played(ts)
        for windows in self.windows.values():
            windows.slide(now)
        for w, length in debs.WINDOWS.items():
            times = {}
            for t in debs.TEAMS:
                if length is None:
                    total = self.whole_game[t]
                    if t == holder_team:
                        total += max(0, upto - state.since)
                else:
                    total = finished_time(self.window_of[(w, t)], t, now)
                    if t == holder_team:
                        total += max(0, played(upto) - max(played(state.since), now - length))
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
