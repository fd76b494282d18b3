"""What a touch of the ball does in pass 1 of the generator (``simulator/plan.py``): shot, out, dribble or pass.

Each plan picks a target the ball is to reach and schedules the next ball event (the reception, or the ball
leaving the pitch); paths that are not shots stay clear of the goal mouths.
"""

from __future__ import annotations

import math

import numpy as np

from simulator import geometry as geo
from simulator.debs import ENTITIES, GOAL_X, GOAL_Y, X_MAX, X_MID, X_MIN, Y_MAX, Y_MIN
from simulator.plan_script import Kick
from simulator.plan_steering import KEEP_AWAY, Steering, clip_pitch, opponents_of, team_of

SHOT_TIME = 1.15  # s, shots reach the goal line sooner than this (the definition allows 1.5 s)


def shot_speed(distance: float, within: float) -> float:
    """Launch speed that covers ``distance`` in ``within`` seconds despite rolling resistance."""
    return distance / within + geo.ROLL_DECEL * within / 2


class KickPlanner(Steering):
    """The part of ``Planner`` that plans each kick's outcome and schedules the event that ends it."""

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
            target = clip_pitch(pos + geo.unit(np.array([X_MID, 0.0]) - pos) * 3.0, 3.0)
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
                target = clip_pitch(q + self.vel[m, j + 1] * min(duration, 1.5) * 0.7, 2.0)
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
