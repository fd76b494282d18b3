"""Shot on goal (DESIGN §6, Q4).

A hit is a shot when the ball's projected path crosses the opponent's goal
mouth within ``horizon_s`` (1.5 s). Inputs: ``INTERRUPTIONS``, ``BALLHITS`` and
``ACTIVEBALL`` (ties in ts resolve in that order, so a hit precedes its own
ball row).

* **When to project.** During the kick's |a| spike the sensor's velocity may
  still be settling, so the projection starts from the first ACTIVEBALL row
  after the hit whose |a| is below ``threshold`` (or ``settle_ms`` after the
  hit, whichever comes first): "right after the hit".
* **Projection.** Velocity = |v| * (vx, vy, vz) / 10000 (m/s). With
  ``flight: physical`` (the default) the ball flies with air drag, bounces on
  grass and rolls (workers/ballflight.py: textbook constants for a size-5
  ball); ``flight: straight`` is the literal reading, a constant horizontal
  speed and a fall under gravity to the ground. The ball must reach the goal
  line plane of the goal the hitter's team attacks (``debs.attacked_goal``,
  first-half direction from ``team_a_attacks_north_first``) within the
  horizon, strictly between the posts and below the bar.
* **While the shot lasts** every ACTIVEBALL row is emitted on ``SHOTS`` with the
  shot id (1, 2, ...) and the shooter, starting with the hit's own row (rows
  seen before the decision are buffered), until the ball leaves the pitch (the
  exit row is not part of the shot), is hit again, play is interrupted or the
  half ends. ``min_gap_ms`` > 0 thins this to the first row of each
  ``min_gap_ms`` bucket of event time (20 gives "up to 50 Hz").
* **Interruptions.** While play is interrupted (from an INTERRUPTIONS ``begin``
  to its ``end``) hits are not shots: a kick after the whistle neither starts
  a shot nor ends one, exactly as possession ignores it
  (workers/possession.py); such hits are counted as
  ``hits_while_interrupted``. An ``end`` at the ts of the restart kick comes
  first (input order), so the restart kick can be a shot.
* ``policy: nfp`` (docs/policies.md). A doubt marker on BALLHITS (a hit may
  be missing or was withheld there) ends a candidate or a running shot, as a
  hit would. Ball rows missing on the path, a step of the ACTIVEBALL ts of
  several ball periods or a reported loss, withhold a candidate (it is never
  a shot) and end a running shot before the gap; counted as
  ``shots_withheld`` and ``shots_cut``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pan.buffers.tuples import Tuple
from pan.components.catalog import register
from pan.components.ordered import OrderedComponent
from pan.config.specs import WorkerSpec
from workers import ballflight, debs
from workers.nfp import BALL_GAP_PS, Doubts

OUTPUT = "SHOTS"
INPUTS = ["INTERRUPTIONS", "BALLHITS", "ACTIVEBALL"]
ROW_FIELDS = ("x", "y", "z", "v", "vx", "vy", "vz", "a", "ax", "ay", "az")
DEFAULTS: dict[str, Any] = {
    "horizon_s": 1.5,
    "threshold": 55_000_000,
    "settle_ms": 25,
    "flight": "physical",
    "min_gap_ms": 0,
    "team_a_attacks_north_first": True,
}


FLIGHTS = {"physical": ballflight.goal_line_crossing, "straight": ballflight.straight_line_crossing}


def enters_goal(row: dict[str, Any], goal: debs.GoalArea, horizon: float, flight: str = "physical") -> float | None:
    """Time (s) at which the projected ball crosses ``goal``'s mouth, or None."""
    scale = row["v"] * 1e-10  # µm/s * (1/10000) -> m/s
    velocity = (row["vx"] * scale, row["vy"] * scale, row["vz"] * scale)
    position = (row["x"] / 1000, row["y"] / 1000, row["z"] / 1000)
    crossing = FLIGHTS[flight](position, velocity, goal.y / 1000, horizon)
    if crossing is None:
        return None
    t, x, z = crossing
    return t if goal.x_min < x * 1000 < goal.x_max and z * 1000 < goal.z_max else None


@register
class Shots(OrderedComponent):
    """Emits the ball rows of each shot on goal on ``SHOTS``."""

    type_name = "shots"
    state_attributes = ("shot_id", "candidate", "buffered", "current", "player", "until", "last_bucket", "interrupted",
                        "bad", "hits", "ignored_hits", "out", "doubts", "ball_ts", "withheld", "cut")
    own_params: ClassVar[tuple[str, ...]] = tuple(DEFAULTS)

    @classmethod
    def input_names(cls, spec: WorkerSpec) -> list[str]:
        return list(spec.inputs) if spec.inputs else list(INPUTS)

    @classmethod
    def main_outputs(cls, spec: WorkerSpec) -> list[str]:
        return [OUTPUT]

    @classmethod
    def check_own_params(cls, spec: WorkerSpec) -> list[str]:
        problems = []
        for key, default in DEFAULTS.items():
            value = spec.params.get(key, default)
            if key == "flight":
                if value not in FLIGHTS:
                    problems.append(f"flight: must be one of {', '.join(FLIGHTS)}, got {value!r}")
                continue
            if isinstance(default, bool):
                if not isinstance(value, bool):
                    problems.append(f"{key}: must be true or false, got {value!r}")
                continue
            positive = key in ("horizon_s", "threshold")
            if type(value) not in (int, float) or value < 0 or (positive and value == 0):
                kind = "positive" if positive else "non-negative"
                problems.append(f"{key}: must be a {kind} number, got {value!r}")
        return problems

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        conf = {key: self.params.get(key, default) for key, default in DEFAULTS.items()}
        self.horizon = float(conf["horizon_s"])
        self.threshold = conf["threshold"]
        self.settle_ps = round(conf["settle_ms"] * debs.PS_PER_MS)
        self.flight = conf["flight"]
        self.gap_ps = round(conf["min_gap_ms"] * debs.PS_PER_MS)
        self.a_north = conf["team_a_attacks_north_first"]
        self.output = ctx.outputs[OUTPUT]
        self.shot_id = 0
        self.candidate: tuple[str, int] | None = None  # (player, hit ts) awaiting the decision
        self.buffered: list[dict[str, Any]] = []
        self.current: int | None = None  # id of the running shot
        self.player = ""
        self.until = 0  # the running shot ends with its half
        self.last_bucket = -1
        self.interrupted = False
        self.bad = 0
        self.hits = 0
        self.ignored_hits = 0
        self.out: list[dict[str, Any]] = []
        self.nfp = self.policy == "nfp"
        self.doubts = Doubts()  # reported losses
        self.ball_ts: int | None = None  # ts of the latest ACTIVEBALL row
        self.withheld = 0
        self.cut = 0

    def process(self, events: list[Tuple]) -> None:
        for ev in events:
            try:
                if "doubt" in ev:  # from a hit detector under nfp: not a hit
                    if self.nfp:
                        self.lose_path()
                    continue
                if "player" in ev:
                    self.on_hit(ev["ts"], ev["player"])
                elif "event" in ev:
                    if ev["event"] == "begin":
                        self.end_shot()
                        self.interrupted = True
                    elif ev["event"] == "end":
                        self.interrupted = False
                else:
                    self.on_ball(ev)
            except (KeyError, TypeError, ValueError, ZeroDivisionError):
                self.bad += 1
        if self.out:
            self.output.extend(self.out)
            self.out = []

    def end_shot(self) -> None:
        self.candidate = None
        self.buffered = []
        self.current = None

    def on_hit(self, ts: int, player: str) -> None:
        if player not in debs.PLAYER_SENSORS or type(ts) is not int:
            self.bad += 1
            return
        if self.interrupted:
            self.ignored_hits += 1
            return
        self.end_shot()
        self.hits += 1
        self.candidate = (player, ts)

    def lose_path(self) -> None:
        """nfp: input the shot depends on may be lost here; the candidate is withheld, a shot ends."""
        if self.candidate is not None:
            self.withheld += 1
        elif self.current is not None:
            self.cut += 1
        self.end_shot()

    def on_ball(self, ev: Tuple) -> None:
        if self.nfp:
            ts, last = ev["ts"], self.ball_ts
            if type(ts) is int:
                self.ball_ts = ts
                gap = last is not None and (ts - last > BALL_GAP_PS or self.doubts.touches(last, ts))
                if gap and (self.candidate is not None or self.current is not None):
                    self.lose_path()
                self.doubts.forget_before(ts - debs.PS_PER_S)
        if self.candidate is None and self.current is None:
            return
        row = {f: ev[f] for f in ROW_FIELDS}
        ts = ev["ts"]
        x, y = row["x"], row["y"]
        check = sum(row.values())
        if type(ts) is not int or check - check != 0:
            raise ValueError("not a finite ball row")
        if not debs.in_pitch(x, y):
            self.end_shot()  # left the pitch: the exit row is not part of the shot
            return
        if self.current is not None:
            if ts > self.until:
                self.end_shot()
                return
            self.emit(ts, row)
            return
        assert self.candidate is not None
        player, hit_ts = self.candidate
        self.buffered.append({"ts": ts, **row})
        if row["a"] >= self.threshold and ts < hit_ts + self.settle_ps:
            return
        half = debs.half_of(hit_ts)
        goal = debs.attacked_goal(debs.team_of(player), half, self.a_north)
        buffered = self.buffered
        self.candidate, self.buffered = None, []
        if enters_goal(row, goal, self.horizon, self.flight) is None:
            return
        self.shot_id += 1
        self.current, self.player = self.shot_id, player
        self.until = next((end for start, end in debs.HALVES if start <= hit_ts <= end),
                          hit_ts + round(self.horizon * debs.PS_PER_S))
        self.last_bucket = -1
        for item in buffered:
            self.emit(item.pop("ts"), item)

    def emit(self, ts: int, row: dict[str, Any]) -> None:
        if self.gap_ps:
            bucket = ts // self.gap_ps
            if bucket == self.last_bucket:
                return
            self.last_bucket = bucket
        self.out.append({"ts": ts, "shot": self.current, "player": self.player, **row})

    def input_lost(self, stream: str | None, count: int, ts_from: int | None, ts_to: int | None) -> None:
        super().input_lost(stream, count, ts_from, ts_to)
        if self.nfp:
            self.doubts.add(ts_from, ts_to)

    def counters(self) -> dict[str, Any]:
        return {**super().counters(), "shots": self.shot_id,
                "shots_withheld": self.withheld, "shots_cut": self.cut, "hits_seen": self.hits, "bad_tuples": self.bad,
                "hits_while_interrupted": self.ignored_hits, "in_shot": self.current is not None}
