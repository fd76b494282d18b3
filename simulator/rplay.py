"""The realistic generator's play engine: players at 10 Hz, the ball by physics.

Every step the players steer (bounded acceleration and speed) toward what
they want: the ball's interception point for the nearest players of each
team, a spot in the team's shifted formation for the others, now and then a
sprint into space. A touch happens when a player's body actually reaches the
ball in flight or on the ground; what the touch does (pass, dribble, shot,
clearance, header, save, deflection) is decided by the player's situation and
executed with an error, and the ball then flies by ``simulator.rball``
physics. Nobody is kept away from anybody: duels, deflections and near misses
are whatever the play produces.

This module holds the interruptions (ball out, fouls, restarts) and the main
loop; the engine's state is in ``simulator/rplay_state.py``, the players'
movement in ``simulator/rplay_movement.py``, touches in
``simulator/rplay_touches.py``, what a kick does in ``simulator/rplay_actions.py``
and what a half produces in ``simulator/rplay_records.py``.
"""

from __future__ import annotations

import math

import numpy as np

from simulator import rball
from simulator.debs import ENTITIES, GOAL_X, N_PLAYERS, X_MAX, X_MID, X_MIN, Y_MAX, Y_MIN
from simulator.motion import Knots
from simulator.rplay_movement import Movement
from simulator.rplay_records import Played, Stop, Touch
from simulator.rplay_state import DT, FORMATION
from simulator.rplay_touches import Touches


class Engine(Touches, Movement):
    """Plays one half; ``attack_a`` is +1 when team A attacks +y."""

    # ---------------------------------------------------------------- interruptions
    def check_out(self, t: float) -> None:
        """Ball over a line during this step: stop play."""
        if self.holder >= 0:
            return
        t_out = rball.boundary_exit(self.arr(), t, t + DT, entered=self.ball_entered)
        if not self.ball_entered:
            p, _ = self.ball_state(t + DT)
            self.ball_entered = bool(X_MIN <= p[0] <= X_MAX and Y_MIN <= p[1] <= Y_MAX)
        whistle = self.whistle_at <= t + DT
        if t_out is None and not whistle:
            return
        if t_out is None:
            t_out = self.whistle_at
        self.whistle_at = math.inf
        p, _ = self.ball_state(t_out)
        rng = self.rng
        last = self.owner if self.owner >= 0 else 0
        if whistle and abs(p[1]) <= Y_MAX and 0 <= p[0] <= X_MAX:
            kind, taker_team, spot, pause = "foul", 1 - self.team_of(last), p.copy(), rng.uniform(8, 18)
        elif abs(p[1]) > Y_MAX - 0.01:  # over a goal line
            side = 1 if p[1] > 0 else -1
            if GOAL_X[side][0] < p[0] < GOAL_X[side][1] and p[2] < 2.44:
                kind, pause = "goal", rng.uniform(20, 35)
                taker_team = 1 if self.sign[0] == side else 0  # the team that conceded kicks off
                spot = np.array([X_MID, 0.0, rball.R])
            else:
                kind, pause = "goalkick", rng.uniform(8, 16)
                taker_team = 0 if self.sign[0] == -side else 1
                spot = np.array([X_MID + rng.uniform(-8, 8), side * (Y_MAX - 5.5), rball.R])
        else:
            kind, pause = "throwin", rng.uniform(5, 12)
            taker_team = 1 - self.team_of(last)
            x = -0.3 if p[0] < X_MID else X_MAX + 0.3
            spot = np.array([x, min(max(p[1], -Y_MAX + 1), Y_MAX - 1), 1.9])
        self.state = "stopped"
        self.stop_start = t_out
        self.restart_t = t_out + pause
        self.restart_kind = kind
        self.restart_spot = spot
        j = min(int((t - self.t0) / DT), self.n - 1)
        team = range(taker_team * 8 + 1, taker_team * 8 + 8) if kind != "goalkick" else [taker_team * 8]
        self.restart_ent = min(team, key=lambda m: float(np.hypot(*(self.pos[m, j] - spot[:2]))))
        if kind == "kickoff" or kind == "goal":
            self.restart_ent = 7 + 8 * taker_team
        self.team = taker_team
        self.receiver = -1
        # the restart ball: the nearest spare one (or the same ball for fouls) is carried to the spot
        old = self.active
        if kind != "foul":
            cands = [b for b in self.balls if b != old]
            rest = {b: self.tracks[b][-1].p0 for b in cands}
            new = min(cands, key=lambda b: float(np.hypot(*(rest[b][:2] - spot[:2]))))
        else:
            new = old
        t_a = max(t_out + 1.5, self.restart_t - pause + 1.5)
        t_b = self.restart_t - 1.0
        start_p = self.tracks[new][-1].p0.copy() if new != old else self.ball_state(t_a)[0]
        if new == old:
            self.tracks[old] = [s for s in self.tracks[old] if s.t0 < t_a]
        lift = np.array([start_p[0], start_p[1], 1.0])
        tr = self.tracks[new]
        carry_to = spot.copy()
        tr.append(rball.Seg(t_a, rball.CARRY, start_p, np.zeros(3), end=carry_to, length=max(t_b - t_a, 0.5)))
        tr.append(rball.Seg(max(t_b, t_a + 0.5), rball.REST, carry_to, np.zeros(3)))
        del lift
        self.active = new
        self.stops.append(Stop(t_out, self.restart_t, kind))

    def restart_touch(self, t: float, j: int) -> bool:
        """Take the restart kick when the taker stands at the ball."""
        if t + DT < self.restart_t:
            return False
        e = self.restart_ent
        p, _ = self.ball_state(t)
        if float(np.hypot(*(self.pos[e, j] - p[:2]))) > 1.2:
            self.restart_t = t + DT  # wait for the taker
            if self.stops:
                self.stops[-1].end = self.restart_t
            return False
        self.state = "restart_kick"
        if self.restart_kind == "throwin":
            v = self.pass_to(e, j, p, False)
            v = v * 0.7
            v[2] = 2.0
            self.ball_entered = False
            self.touches.append(Touch(t, e, self.active, "hands", "throwin", 0, p.copy(), v.copy(), 0.3, v.copy()))
            self.tracks[self.active] = [s for s in self.tracks[self.active] if s.t0 < t] + rball.free_path(t, p, v)
            self.last_touch_t[e] = t
            self.receiver = self._next_receiver
            self.owner = e
        else:
            self.do_touch(t, e, "foot", False)
            self.touches[-1].kind = "restart" if self.restart_kind != "kickoff" else "kickoff"
        if self.stops and self.stops[-1].end != t:
            self.stops[-1].end = t
        self.state = "play"
        return True

    # ---------------------------------------------------------------- main loop
    def run(self) -> Played:
        p0 = self.anchors(np.array([X_MID, 0.0, 0.0]))
        for e in range(N_PLAYERS):
            f = FORMATION[e % 8].copy()
            f[1] = min(f[1], -1.0)
            p0[e] = self.world(e, f)
        self.pos[:, 0] = p0
        self.restart_spot = np.array([X_MID, 0.0, rball.R])
        self.state = "restart"
        self.restart_t = 0.0
        self.chasers_now: dict[int, tuple[float, np.ndarray]] = {}
        self._next_receiver = -1
        for j in range(self.n - 1):
            t = self.t0 + j * DT
            if t >= self.play_len:
                self.state = "over"
            self.chasers_now = self.chasers(t) if self.state == "play" else {}
            target, speed = self.step_targets(j, t)
            self.steer(j, target, speed)
            if self.state in ("restart", "stopped") and t >= 0:
                self.state = "restart"
                self.restart_touch(t, j + 1)
                continue
            if self.state == "held":
                if t >= self.hold_until:
                    e = self.holder
                    self.holder = -1
                    self.state = "play"
                    side = self.goal_side(e)
                    p = np.array([*self.pos[e, j + 1], 0.6])
                    p[:2] += np.array([0.0, 0.3 * side])
                    self.tracks[self.active].append(rball.Seg(t + DT - 0.2, rball.HELD, p, np.zeros(3), ent=e,
                                                              end=np.array([0.0, 0.3 * side, 0.6])))
                    self.tracks[self.active].append(rball.Seg(t + DT - 0.05, rball.REST, p, np.zeros(3)))
                    v = self.lofted(p, np.array([X_MID + self.rng.normal(0, 10), side * 10.0]), 38)
                    self.touches.append(Touch(t + DT, e, self.active, "foot", "punt", 1, p.copy(), v, 0.01, v.copy()))
                    self.tracks[self.active] += rball.free_path(t + DT, p, v)
                    self.last_touch_t[e] = t + DT
                    self.owner = e
                continue
            if self.state == "restart_kick":
                self.state = "play"
            if self.state != "play":
                continue
            hit = self.find_touch(j, t)
            if hit is not None:
                tc, e, part = hit
                self.do_touch(tc, e, part, e not in self.chasers_now)
            if self.state == "play":
                self.check_out(t)
        knots = Knots(self.t0, DT, self.pos, self.vel)
        heading = np.array([math.pi / 2 * self.sign[e] if e < N_PLAYERS else 0.0 for e in range(len(ENTITIES))])
        knots.finish(heading)
        return Played(knots, self.touches, self.stops, self.tracks, self.sprints)
