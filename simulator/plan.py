"""Pass 1 of the generator: the play script and the players' 10 Hz motion.

Players steer toward targets with bounded acceleration and speed; who has to
be where (receiver of a pass, dribbler, restart taker) is decided by the play
script as events happen. The ball itself is only sketched here; pass 2
(``simulator.ball``) pins every kick exactly to the kicker's leg sensor.

This module runs the time loop and the play's events (kicks, fouls, the ball
going out, the end); the steering and the planner's state are in
``simulator/plan_steering.py``, what each kick does in ``simulator/plan_kicks.py``,
and the script's records in ``simulator/plan_script.py``.
"""

from __future__ import annotations

import math

import numpy as np

from simulator import geometry as geo
from simulator.debs import ENTITIES, GOAL_Y, N_PLAYERS, REF_INDEX, X_MAX, X_MID, X_MIN
from simulator.motion import Knots
from simulator.plan_kicks import KickPlanner
from simulator.plan_script import Kick, Session, Stop
from simulator.plan_steering import DT, FORMATION, clip_pitch, opponents_of

FOUL_MEAN_S = 55.0  # mean play time between fouls
BALL_SPOTS = [(-1.5, 15.0), (X_MAX + 1.5, -15.0), (-1.5, -15.0), (X_MAX + 1.5, 15.0)]


class Planner(KickPlanner):
    """Runs the play script for one session (half)."""

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
        rest = clip_pitch(ball + geo.unit(last.aim - ball) * 1.0, 1.0)
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


def plan_session(session: Session, seed: int) -> Session:
    """Run pass 1 for one half with its own random stream."""
    rng = np.random.default_rng([seed, 7, session.index])
    return Planner(session, rng).run()
