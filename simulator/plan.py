"""Pass 1 of the generator: the play script and the players' 10 Hz motion.

Players steer toward targets with bounded acceleration and speed; who has to
be where (receiver of a pass, dribbler, restart taker) is decided by the play
script as events happen. The ball itself is only sketched here; pass 2
(``simulator.ball``) pins every kick exactly to the kicker's leg sensor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from simulator import geometry as geo
from simulator.debs import (
    BALL_PERIOD_PS,
    ENTITIES,
    GOAL_X,
    GOAL_Y,
    N_PLAYERS,
    PS_PER_S,
    REF_INDEX,
    X_MAX,
    X_MID,
    X_MIN,
    Y_MAX,
    Y_MIN,
)
from simulator.motion import Knots

DT = 0.1  # s, knot spacing
A_MAX = 3.5  # m/s^2, player acceleration limit
V_MAX = 8.0  # m/s (28.8 km/h), body speed cap
V_MAX_KEEPER = 6.5
KEEP_AWAY = 3.0  # m, bystanders keep this far from the ball and upcoming kick points
SEPARATION = 2.2  # m, minimum body distance of bystanders from the ball at a kick
FOUL_MEAN_S = 55.0  # mean play time between fouls
SHOT_TIME = 1.15  # s, shots reach the goal line sooner than this (the definition allows 1.5 s)

# Speed classes (DESIGN Q1 bands, m/s) and how often players pick them.
SPEED_BANDS = [(0.0, 0.0), (1.0, 3.0), (3.15, 3.8), (3.95, 4.6), (4.8, 6.5), (6.9, 7.9)]
FIELD_P = [0.12, 0.55, 0.12, 0.09, 0.08, 0.04]
KEEPER_P = [0.45, 0.55, 0.0, 0.0, 0.0, 0.0]

# Formation for a team attacking +y (x, y); index = shirt - 1. A8/B8 is the forward.
FORMATION = np.array(
    [[X_MID, -31.5], [12.0, -20.0], [X_MID, -22.0], [40.5, -20.0], [9.0, -8.0], [X_MID, -10.0], [43.5, -8.0],
     [X_MID, -2.5]]
)
BALL_SPOTS = [(-1.5, 15.0), (X_MAX + 1.5, -15.0), (-1.5, -15.0), (X_MAX + 1.5, 15.0)]


@dataclass
class Kick:
    """One touch of the ball, as planned."""

    t_ps: int  # on the ball's sample grid
    t: float  # seconds relative to the session's kick-off
    player: int
    leg: str
    ball: int
    aim: np.ndarray  # planned target point of the ball (x, y)
    duration: float = 0.0  # planned travel time to ``aim`` (passes, dribbles)
    end: str = "kick"  # "kick": next kick receives it; "out": leaves the pitch; "stop": play stopped
    speed: float = 0.0  # launch speed for "out"
    lofted: bool = False
    t_stop: float = 0.0  # for "stop"
    out_kind: str = ""  # goal, goalkick, throwin


@dataclass
class Stop:
    """Play stopped: from ``start`` until the restart kick (None if play does not resume)."""

    start: float
    kind: str  # foul, throwin, goalkick, goal, end
    kick_before: int  # index of the last kick before the stop
    restart: int | None = None  # index of the restart kick
    new_ball: int | None = None


@dataclass
class Session:
    """One half as generated: its time frame, the players' knots and the play script."""

    index: int
    ko_ps: int
    lead: float
    play_len: float
    attack_a: int  # +1 if team A attacks y = +33941 in this half
    balls: tuple[int, ...]
    ball_phase: dict[int, int]
    player_phase: dict[int, int]
    knots: Knots | None = None
    kicks: list[Kick] = field(default_factory=list)
    stops: list[Stop] = field(default_factory=list)
    ball_start: dict[int, np.ndarray] = field(default_factory=dict)

    @property
    def base_ps(self) -> int:
        """First instant of this half's rows."""
        return self.ko_ps - round(self.lead * PS_PER_S)

    @property
    def end_ps(self) -> int:
        """End (exclusive) of this half's rows."""
        return self.ko_ps + round((self.play_len + self.lead) * PS_PER_S)

    def attack(self, player: int) -> int:
        return self.attack_a if player < 8 else -self.attack_a

    def snap(self, t: float, ball: int) -> tuple[int, float]:
        """First sample instant of ``ball`` at or after ``t``; (ps, seconds)."""
        t_ps = self.ko_ps + round(t * PS_PER_S)
        origin = self.base_ps + self.ball_phase[ball]
        n = -((origin - t_ps) // BALL_PERIOD_PS)
        snapped = origin + n * BALL_PERIOD_PS
        return snapped, (snapped - self.ko_ps) / PS_PER_S


def shot_speed(distance: float, within: float) -> float:
    """Launch speed that covers ``distance`` in ``within`` seconds despite rolling resistance."""
    return distance / within + geo.ROLL_DECEL * within / 2


def team_of(player: int) -> range:
    return range(0, 8) if player < 8 else range(8, 16)


def opponents_of(player: int) -> range:
    return range(8, 16) if player < 8 else range(0, 8)


def _clip_pitch(p: np.ndarray, margin: float) -> np.ndarray:
    return np.array([min(max(p[0], X_MIN + margin), X_MAX - margin), min(max(p[1], Y_MIN + margin), Y_MAX - margin)])


class Planner:
    """Runs the play script for one session (half)."""

    def __init__(self, session: Session, rng: np.random.Generator) -> None:
        self.s = session
        self.rng = rng
        n = math.ceil((session.play_len + 2 * session.lead) / DT) + 2
        self.n = n
        self.t0 = -session.lead
        self.pos = np.zeros((len(ENTITIES), n, 2))
        self.vel = np.zeros((len(ENTITIES), n, 2))
        # Episode state of free-running entities.
        self.ep_end = np.zeros(len(ENTITIES))
        self.ep_speed = np.zeros(len(ENTITIES))
        self.ep_offset = np.zeros((len(ENTITIES), 2))
        self.involved: dict[int, tuple[np.ndarray, float]] = {}
        self.pending: tuple[str, float, int] | None = None  # (kind, t, player) of the next ball event
        self.pending_point: np.ndarray | None = None
        self.ball_from = (np.array([X_MID, 0.0]), 0.0)
        self.ball_to = (np.array([X_MID, 0.0]), 1.0)
        self.active = session.balls[0]
        self.rest: dict[int, np.ndarray] = {}
        self.touches_left = 0
        self.holder: int | None = None
        self.mode = "pre"
        self.ended = False
        self.shirt = np.arange(N_PLAYERS) % 8
        self.sign = np.array([session.attack(e) for e in range(N_PLAYERS)], dtype=float)
        self.vmax = np.array([V_MAX_KEEPER if e.is_keeper else V_MAX for e in ENTITIES])

    # ----- helpers -------------------------------------------------------------------------
    def world(self, player: int, xy: np.ndarray) -> np.ndarray:
        """Formation coordinates (own goal at -y) to pitch coordinates."""
        return np.array([xy[0], xy[1] * self.s.attack(player)])

    def ball_estimate(self, t: float) -> np.ndarray:
        (p0, t0), (p1, t1) = self.ball_from, self.ball_to
        if t1 <= t0:
            return p1
        f = min(max((t - t0) / (t1 - t0), 0.0), 1.0)
        return p0 + (p1 - p0) * f

    def new_episode(self, e: int, t: float) -> None:
        probs = KEEPER_P if ENTITIES[e].is_keeper else FIELD_P
        band = int(self.rng.choice(len(SPEED_BANDS), p=probs))
        lo, hi = SPEED_BANDS[band]
        self.ep_speed[e] = self.rng.uniform(lo, hi) if hi > 0 else 0.0
        radius = 2.0 if ENTITIES[e].is_keeper else 8.0
        ang = self.rng.uniform(0, 2 * math.pi)
        self.ep_offset[e] = radius * math.sqrt(self.rng.uniform()) * np.array([math.cos(ang), math.sin(ang)])
        self.ep_end[e] = t + self.rng.uniform(2.0, 7.0)

    def position_at(self, e: int, j: int, t: float) -> np.ndarray:
        """Body position at ``t`` inside knot interval j..j+1 (already integrated)."""
        s = (t - (self.t0 + j * DT)) / DT
        s = min(max(s, 0.0), 1.0)
        s2, s3 = s * s, s * s * s
        return (
            (2 * s3 - 3 * s2 + 1) * self.pos[e, j]
            + (s3 - 2 * s2 + s) * DT * self.vel[e, j]
            + (-2 * s3 + 3 * s2) * self.pos[e, j + 1]
            + (s3 - s2) * DT * self.vel[e, j + 1]
        )

    # ----- the time loop ---------------------------------------------------------------------
    def run(self) -> Session:
        self.setup()
        for j in range(self.n - 1):
            t = self.t0 + j * DT
            self.step(j, t)
            self.events(j, t + DT)
        for _ in range(3):
            if not self.separate():
                break
        knots = Knots(self.t0, DT, self.pos, self.vel)
        heading = np.array([math.pi / 2 * self.s.attack(e) if e < N_PLAYERS else 0.0 for e in range(len(ENTITIES))])
        knots.finish(heading)
        self.s.knots = knots
        return self.s

    def separate(self) -> int:
        """Nudge bystanders away from every kick so each hit has one obvious kicker.

        Steering alone leaves a few near misses; a smooth Gaussian displacement
        (position and velocity knots together) fixes them without speed jumps.
        Returns how many nudges were needed.
        """
        knots = Knots(self.t0, DT, self.pos, self.vel)
        everyone = np.arange(len(ENTITIES))
        times = self.t0 + np.arange(self.n) * DT
        nudges = 0
        for k in self.s.kicks:
            t = np.full(len(ENTITIES), k.t)
            body = knots.body(everyone, t)
            ball = body[k.player] + geo.unit(k.aim - body[k.player]) * 0.3
            gap = body - ball
            dist = np.hypot(gap[:, 0], gap[:, 1])
            for e in np.nonzero(dist < SEPARATION)[0]:
                if e == k.player:
                    continue
                amount = SEPARATION + 0.2 - dist[e]
                sigma = max(0.8, amount / 0.8)
                lo = max(0, int((k.t - 4 * sigma - self.t0) / DT))
                hi = min(self.n, int((k.t + 4 * sigma - self.t0) / DT) + 2)
                x = times[lo:hi] - k.t
                g = np.exp(-0.5 * (x / sigma) ** 2)
                n = geo.unit(gap[e]) if dist[e] > 1e-6 else np.array([1.0, 0.0])
                self.pos[e, lo:hi] += amount * g[:, None] * n
                self.vel[e, lo:hi] += (amount * -x / sigma**2 * g)[:, None] * n
                nudges += 1
        return nudges

    def setup(self) -> None:
        kicker = 7 if self.s.index == 0 else 15
        for e in range(N_PLAYERS):
            p = self.world(e, FORMATION[e % 8])
            if e % 8 == 7 and e != kicker:
                p = self.world(e, np.array([X_MID + 4.0, -10.5]))
            self.pos[e, 0] = p
        back = self.world(kicker, np.array([0.0, -1.0]))
        self.pos[kicker, 0] = np.array([X_MID, 0.0]) - 0.35 * back
        self.pos[REF_INDEX, 0] = np.array([X_MID - 12.0, 3.0])
        for i, b in enumerate(self.s.balls):
            if b == self.active:
                self.s.ball_start[b] = np.array([X_MID, 0.0])
            else:
                self.rest[b] = np.array(BALL_SPOTS[(i - 1) % len(BALL_SPOTS)])
                self.s.ball_start[b] = self.rest[b].copy()
        t_ps, t = self.s.snap(0.0, self.active)
        self.pending = ("kickoff", t, kicker)
        self.pending_ps = t_ps
        self.pending_point = np.array([X_MID, 0.0])
        self.involved[kicker] = (self.pos[kicker, 0].copy(), t)
        self.ep_end[:] = self.rng.uniform(0.0, 3.0, len(ENTITIES)) + 0.5

    def anchors(self, ball: np.ndarray) -> np.ndarray:
        """Where each entity would stand given the ball: formation shifted toward play."""
        sign = self.sign
        by = ball[1] * sign
        fx, fy = FORMATION[:, 0][self.shirt], FORMATION[:, 1][self.shirt]
        x = fx + 0.3 * (ball[0] - fx)
        y = np.clip(fy + 0.55 * by, -30.0, 29.0)
        keeper = self.shirt == 0
        x[keeper] = X_MID + 0.15 * (ball[0] - X_MID)
        y[keeper] = -31.5 + 0.04 * (by[keeper] + 34)
        out = np.empty((len(ENTITIES), 2))
        out[:N_PLAYERS, 0] = np.clip(x, X_MIN + 1.0, X_MAX - 1.0)
        out[:N_PLAYERS, 1] = np.clip(y * sign, Y_MIN + 1.0, Y_MAX - 1.0)
        side = -1.0 if ball[0] > X_MID else 1.0
        out[REF_INDEX] = _clip_pitch(ball + np.array([side * 9.0, -4.0]), 2.0)
        return out

    def step(self, j: int, t: float) -> None:
        self.cur_j = j
        p = self.pos[:, j]
        v = self.vel[:, j]
        ball = self.ball_estimate(t)
        if self.mode == "pre":
            want = np.zeros_like(v)
        else:
            for e in np.nonzero(t >= self.ep_end)[0]:
                if e not in self.involved:
                    self.new_episode(int(e), t)
            target = self.anchors(ball) + self.ep_offset
            speed = self.ep_speed.copy()
            presser = self.presser(ball) if self.mode == "play" else None
            if presser is not None:
                target[presser] = ball + np.array([0.0, -3.8 * self.s.attack(presser)])
                speed[presser] = 4.2
            gap = target - p
            dist = np.hypot(gap[:, 0], gap[:, 1])
            speed = np.minimum(np.minimum(speed, self.vmax), np.sqrt(5.0 * np.maximum(dist - 0.2, 0.0)))
            go = (dist > 0.3) & (speed > 0)
            want = np.where(go[:, None], gap / np.maximum(dist, 1e-9)[:, None] * speed[:, None], 0.0)
            # Bystanders step away from the ball and from the next kick point.
            points = [ball]
            if self.pending_point is not None and self.pending is not None and self.pending[1] - t <= 3.0:
                points.append(self.pending_point)
            for q in points:
                away = p - q
                dq = np.hypot(away[:, 0], away[:, 1])
                near = dq < KEEP_AWAY
                want[near] = away[near] / np.maximum(dq[near], 1e-6)[:, None] * 4.0
        for e, (target_e, t_arr) in self.involved.items():
            gap_e = target_e - p[e]
            dist_e = float(np.hypot(*gap_e))
            need = dist_e / max(t_arr - t - 0.15, 0.05)
            speed_e = min(self.vmax[e], need * 1.1, math.sqrt(2 * 3.0 * max(dist_e - 0.03, 0.0)))
            want[e] = gap_e / dist_e * speed_e if dist_e > 0.03 else 0.0
        dv = want - v
        norm = np.hypot(dv[:, 0], dv[:, 1])
        scale = np.minimum(1.0, A_MAX * DT / np.maximum(norm, 1e-12))
        v1 = v + dv * scale[:, None]
        sp = np.hypot(v1[:, 0], v1[:, 1])
        v1 *= np.minimum(1.0, V_MAX / np.maximum(sp, 1e-12))[:, None]
        self.vel[:, j + 1] = v1
        self.pos[:, j + 1] = p + (v + v1) / 2 * DT

    def presser(self, ball: np.ndarray) -> int | None:
        if self.holder is None:
            return None
        cands = [o for o in opponents_of(self.holder) if o % 8 != 0 and o not in self.involved]
        if not cands:
            return None
        return min(cands, key=lambda o: float(np.hypot(*(self.pos[o, self.cur_j] - ball))))

    # ----- events ----------------------------------------------------------------------------
    def events(self, j: int, t1: float) -> None:
        self.cur_j = j + 1
        while True:
            cands: list[tuple[float, str]] = []
            if self.pending is not None:
                cands.append((self.pending[1], "pending"))
            if not self.ended:
                cands.append((self.s.play_len, "end"))
            cands = [c for c in cands if c[0] <= t1]
            if not cands:
                break
            te, what = min(cands)
            if what == "end":
                self.end_play(j, te)
                continue
            kind, _, player = self.pending  # type: ignore[misc]
            self.pending = None
            if kind == "kick":
                self.kick(j, te, player, restart=False)
            elif kind in ("restart", "kickoff"):
                self.kick(j, te, player, restart=True, kickoff=kind == "kickoff")
            elif kind == "out":
                self.ball_out(j, te)
        if self.mode == "play" and not self.ended and self.pending is not None and self.pending[0] == "kick":
            last = self.s.kicks[-1]
            if (
                self.pending[1] - t1 > 0.5
                and t1 - last.t > 0.2
                and not last.lofted
                and self.rng.uniform() < DT / FOUL_MEAN_S
            ):
                self.foul(j, t1)

    def end_play(self, j: int, t: float) -> None:
        if self.pending is not None and self.pending[0] == "out":
            return  # let the ball leave first; that stop becomes the final one
        self.ended = True
        if self.mode == "play" and self.s.kicks:
            last = self.s.kicks[-1]
            if last.end == "kick":
                last.end = "stop"
                last.t_stop = t
            self.s.stops.append(Stop(t, "end", len(self.s.kicks) - 1))
        elif self.mode == "stopped" and self.s.stops:
            self.s.stops[-1].restart = None
        self.pending = None
        self.pending_point = None
        self.involved.clear()
        self.mode = "ended"

    def foul(self, j: int, t: float) -> None:
        last = self.s.kicks[-1]
        last.end = "stop"
        last.t_stop = t
        ball = self.ball_estimate(t)
        rest = _clip_pitch(ball + geo.unit(last.aim - ball) * 1.0, 1.0)
        fouled_team = opponents_of(last.player)
        taker = min((o for o in fouled_team if o % 8 != 0), key=lambda o: float(np.hypot(*(self.pos[o, j + 1] - rest))))
        self.involved.clear()
        self.stop_play(t, "foul", rest, taker, self.rng.uniform(12.0, 30.0), same_ball=True)

    def stop_play(self, t: float, kind: str, spot: np.ndarray, taker: int, pause: float, same_ball: bool) -> None:
        self.holder = None
        self.mode = "stopped"
        stop = Stop(t, kind, len(self.s.kicks) - 1)
        ball = self.active
        if not same_ball:
            ball = min(self.rest, key=lambda b: float(np.hypot(*(self.rest[b] - spot))))
        stop.new_ball = ball
        self.s.stops.append(stop)
        t_ps, t_r = self.s.snap(t + pause, ball)
        self.pending = ("restart", t_r, taker)
        self.pending_ps = t_ps
        self.pending_point = spot
        self.involved = {taker: (spot.copy(), t_r - 2.0)}
        self.ball_from = (spot, t)
        self.ball_to = (spot, t + 1)
        self.rest.pop(ball, None)  # in play again after the restart; re-added when it goes out
        self.next_ball = ball

    def ball_out(self, j: int, t: float) -> None:
        last = self.s.kicks[-1]
        start = self.ball_from[0]
        direction = geo.unit(last.aim - start)
        cross = self.ball_estimate(t)
        self.rest[self.active] = cross + direction * 2.0
        if last.out_kind == "goal":
            taker = opponents_of(last.player)[7]  # the conceding team kicks off
            spot = np.array([X_MID, 0.0])
            pause = self.rng.uniform(30.0, 45.0)
        elif last.out_kind == "goalkick":
            keeper = opponents_of(last.player)[0]
            taker = keeper
            side = self.s.attack(last.player)
            spot = np.array([X_MID + self.rng.uniform(-4, 4), GOAL_Y[side] - side * 5.5])
            pause = self.rng.uniform(15.0, 25.0)
        else:
            x = X_MIN + 0.6 if cross[0] < X_MID else X_MAX - 0.6
            spot = np.array([x, min(max(cross[1], -31.0), 31.0)])
            taker = min((o for o in opponents_of(last.player) if o % 8 != 0),
                        key=lambda o: float(np.hypot(*(self.pos[o, j + 1] - spot))))
            pause = self.rng.uniform(8.0, 14.0)
        self.involved.clear()
        self.stop_play(t, last.out_kind, spot, taker, pause, same_ball=False)

    # ----- kicks -----------------------------------------------------------------------------
    def kick(self, j: int, t: float, player: int, restart: bool, kickoff: bool = False) -> None:
        t_ps = self.pending_ps
        if restart and not kickoff:
            self.active = self.next_ball
        self.mode = "play"
        self.involved.pop(player, None)
        if self.holder != player:
            self.touches_left = 0 if self.rng.uniform() < 0.3 else int(self.rng.integers(1, 6))
        self.holder = player
        pos = self.position_at(player, j, t)
        leg = "legL" if self.rng.uniform() < 0.5 else "legR"
        kick = Kick(t_ps, t, player, leg, self.active, pos.copy())
        self.s.kicks.append(kick)
        if restart and not kickoff:
            self.s.stops[-1].restart = len(self.s.kicks) - 1
        if not restart and not ENTITIES[player].is_keeper and self.try_shot(j, kick, pos):
            return
        near_line = min(pos[0] - X_MIN, X_MAX - pos[0]) < 12
        if not restart and near_line and self.rng.uniform() < 0.05 and self.plan_out(kick, pos):
            return
        if not restart and not ENTITIES[player].is_keeper and self.touches_left > 0 and self.plan_dribble(j, kick, pos):
            self.touches_left -= 1
            return
        if self.plan_pass(j, kick, pos, restart):
            return
        self.plan_dribble(j, kick, pos, force=True)

    def schedule_kick(self, kick: Kick, start: np.ndarray, target: np.ndarray, duration: float, receiver: int) -> None:
        t_ps, t_arr = self.s.snap(kick.t + duration, self.active)
        kick.aim = target.copy()
        kick.duration = t_arr - kick.t
        kick.end = "kick"
        self.pending = ("kick", t_arr, receiver)
        self.pending_ps = t_ps
        self.pending_point = target.copy()
        self.involved[receiver] = (target.copy(), t_arr)
        self.ball_from = (start.copy(), kick.t)
        self.ball_to = (target.copy(), t_arr)

    def is_shot_like(self, start: np.ndarray, direction: np.ndarray, u: float, d: float, margin: float) -> bool:
        """Would this path cross either goal mouth soon? Non-shots must stay clear of that."""
        p3 = np.array([start[0], start[1], 0.11])
        for side in (1, -1):
            tau = geo.goal_entry_time(p3, direction, u, d, 0.0, 0.0, side, margin)
            if tau is not None and tau < geo.SHOT_HORIZON + 1.0:
                return True
        return False

    def try_shot(self, j: int, kick: Kick, pos: np.ndarray) -> bool:
        side = self.s.attack(kick.player)
        goal = np.array([X_MID, GOAL_Y[side]])
        dist = float(np.hypot(*(goal - pos)))
        if dist > 28 or abs(pos[1]) > abs(GOAL_Y[side]) - 3:
            return False
        if self.rng.uniform() > (0.45 if dist < 20 else 0.2):
            return False
        x0, x1 = GOAL_X[side]
        outcome = self.rng.choice(["goal", "save", "wide"], p=[0.3, 0.5, 0.2])
        keeper = opponents_of(kick.player)[0]
        kpos = self.pos[keeper, j + 1]
        if outcome == "save":
            tx = min(max(kpos[0] + self.rng.uniform(-1.5, 1.5), x0 + 1.3), x1 - 1.3)
            mouth = np.array([tx, GOAL_Y[side]])
            direction = geo.unit(mouth - pos)
            save = mouth - direction * (0.9 / abs(direction[1]))
            length = float(np.hypot(*(save - pos)))
            speed = max(self.rng.uniform(16.0, 26.0), shot_speed(length + 0.9, SHOT_TIME))
            duration = length / (speed - 0.5)
            if speed > 32.0 or float(np.hypot(*(save - kpos))) > 6.0 * duration:
                outcome = "goal"
            else:
                self.schedule_kick(kick, pos, save, duration, keeper)
                self.holder = kick.player
                return True
        if outcome == "goal":
            tx = self.rng.uniform(x0 + 1.0, x1 - 1.0)
        else:
            tx = x0 - self.rng.uniform(1.8, 4.0) if self.rng.uniform() < 0.5 else x1 + self.rng.uniform(1.8, 4.0)
        mouth = np.array([tx, GOAL_Y[side]])
        direction = geo.unit(mouth - pos)
        speed = max(self.rng.uniform(18.0, 28.0), shot_speed(float(np.hypot(*(mouth - pos))), SHOT_TIME))
        if speed > 32.0:
            return False
        kick.aim = mouth + direction * 3.0
        kick.speed = speed
        kick.end = "out"
        kick.out_kind = "goal" if outcome == "goal" else "goalkick"
        self.schedule_out(kick, pos, direction)
        return True

    def schedule_out(self, kick: Kick, pos: np.ndarray, direction: np.ndarray) -> None:
        s_exit = geo.exit_distance(pos, direction)
        tau = geo.time_to_cover(kick.speed, geo.ROLL_DECEL, s_exit)
        if tau is None:  # too slow to reach the line: kick harder
            kick.speed = math.sqrt(2 * geo.ROLL_DECEL * s_exit + 16.0)
            tau = geo.time_to_cover(kick.speed, geo.ROLL_DECEL, s_exit)
        assert tau is not None
        self.pending = ("out", kick.t + tau, kick.player)
        self.pending_point = None
        self.ball_from = (pos.copy(), kick.t)
        self.ball_to = (pos + direction * s_exit, kick.t + tau)

    def plan_out(self, kick: Kick, pos: np.ndarray) -> bool:
        x = X_MIN - 3.0 if pos[0] < X_MID else X_MAX + 3.0
        target = np.array([x, min(max(pos[1] + self.rng.uniform(-8, 8), -30.0), 30.0)])
        direction = geo.unit(target - pos)
        kick.speed = self.rng.uniform(9.0, 14.0)
        if self.is_shot_like(pos, direction, kick.speed, geo.ROLL_DECEL, 2.0):
            return False
        kick.aim = target
        kick.end = "out"
        kick.out_kind = "throwin"
        self.holder = kick.player
        self.schedule_out(kick, pos, direction)
        return True

    def plan_dribble(self, j: int, kick: Kick, pos: np.ndarray, force: bool = False) -> bool:
        side = self.s.attack(kick.player)
        goal = np.array([X_MID, GOAL_Y[side]])
        base = math.atan2(*(goal - pos)[::-1])
        speed = self.rng.uniform(3.0, 6.0)
        duration = self.rng.uniform(0.5, 0.9)
        for attempt in range(12):
            ang = base + self.rng.normal(0, 0.6) + (attempt // 3) * 0.7 * (1 if attempt % 2 else -1)
            direction = np.array([math.cos(ang), math.sin(ang)])
            target = pos + direction * speed * duration
            if target[0] < X_MIN + 3 or target[0] > X_MAX - 3 or target[1] < Y_MIN + 3 or target[1] > Y_MAX - 3:
                continue
            if self.too_close(target, kick.player):
                continue
            u, d = geo.roll_params(speed * duration, duration)
            if self.is_shot_like(pos, direction, u, d, 2.5):
                continue
            self.schedule_kick(kick, pos, target, duration, kick.player)
            return True
        if force:  # boxed in: a short pass back toward the middle
            target = _clip_pitch(pos + geo.unit(np.array([X_MID, 0.0]) - pos) * 3.0, 3.0)
            self.schedule_kick(kick, pos, target, 0.8, kick.player)
            return True
        return False

    def too_close(self, point: np.ndarray, player: int) -> bool:
        """Another entity already stands where the next touch would be."""
        for e in range(len(ENTITIES)):
            if e != player and float(np.hypot(*(self.pos[e, self.cur_j] - point))) < KEEP_AWAY:
                return True
        return False

    def plan_pass(self, j: int, kick: Kick, pos: np.ndarray, restart: bool) -> bool:
        side = self.s.attack(kick.player)
        mates = [m for m in team_of(kick.player) if m != kick.player]
        weights = []
        plans = []
        for m in mates:
            q = self.pos[m, j + 1]
            dist = float(np.hypot(*(q - pos)))
            if dist < (3.0 if restart else 5.0) or dist > 40:
                continue
            speed = min(max(6.0 + 0.35 * dist, 7.0), 18.0)
            duration = dist / speed
            for _ in range(2):
                target = _clip_pitch(q + self.vel[m, j + 1] * min(duration, 1.5) * 0.7, 2.0)
                dist = float(np.hypot(*(target - pos)))
                duration = max(dist / speed, 0.3)
            lofted = dist > 25 and self.rng.uniform() < 0.6
            if lofted:
                duration = min(max(duration, 1.2), 2.2)
            u, d = geo.roll_params(dist, duration)
            if self.is_shot_like(pos, geo.unit(target - pos), u, d, 2.0):
                continue
            if self.too_close(target, m) and m != kick.player:
                # someone else stands there; that would make the reception ambiguous
                near = [e for e in range(len(ENTITIES)) if e not in (m,)
                        and float(np.hypot(*(self.pos[e, j + 1] - target))) < 1.6]
                if near:
                    continue
            gain = (target[1] - pos[1]) * side
            w = math.exp(-(((dist - 15.0) / 10.0) ** 2)) * (2.5 if gain > 0 else 1.0)
            if ENTITIES[m].is_keeper:
                w *= 0.15
            weights.append(w)
            plans.append((m, target, duration, lofted))
        if not plans:
            return False
        w = np.array(weights)
        m, target, duration, lofted = plans[int(self.rng.choice(len(plans), p=w / w.sum()))]
        if not restart and not lofted and self.rng.uniform() < 0.18:
            intercepted = self.interception(j, pos, target, duration, kick.player)
            if intercepted is not None:
                m, target, duration = intercepted
        kick.lofted = lofted
        self.schedule_kick(kick, pos, target, duration, m)
        return True

    def interception(
        self, j: int, pos: np.ndarray, target: np.ndarray, duration: float, player: int
    ) -> tuple[int, np.ndarray, float] | None:
        point = pos + (target - pos) * 0.6
        cands = [o for o in opponents_of(player) if o % 8 != 0]
        o = min(cands, key=lambda c: float(np.hypot(*(self.pos[c, j + 1] - point))))
        t_cut = duration * 0.6
        if float(np.hypot(*(self.pos[o, j + 1] - point))) > 6.5 * t_cut or t_cut < 0.4:
            return None
        if self.too_close(point, o):
            return None
        return o, point, t_cut


def plan_session(session: Session, seed: int) -> Session:
    """Run pass 1 for one half with its own random stream."""
    rng = np.random.default_rng([seed, 7, session.index])
    return Planner(session, rng).run()
