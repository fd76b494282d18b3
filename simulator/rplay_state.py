"""The realistic play engine's parameters and state (``simulator/rplay.py``): the pitch, the ball, the teams.

``EngineState`` sets up one half (players, balls and their tracks, who restarts) and answers where the
active ball is; the engine's other parts (``simulator/rplay_movement.py``, ``simulator/rplay_actions.py``,
``simulator/rplay_touches.py``) build on it.
"""

from __future__ import annotations

import math

import numpy as np

from simulator import rball
from simulator.debs import ENTITIES, GOAL_Y, N_PLAYERS, X_MAX, X_MID
from simulator.rplay_records import Stop, Touch

DT = 0.1
SUB = 10  # sub-steps per step when looking for a touch
A_MAX = 4.5
V_CAP = np.array([7.0 if e.is_keeper else 9.0 for e in ENTITIES])
V_CAP[-1] = 7.0
FOOT_REACH = 0.75  # m, body centre to ball centre for a deliberate foot touch
SLIDE_REACH = 1.0
FOOT_Z = 0.75
HEAD_Z = (1.35, 2.35)
HAND_REACH = 1.3  # keeper's dive
HAND_Z = 2.6
RETOUCH_S = 0.3
SPARE_SPOTS = [(-1.6, 12.0), (X_MAX + 1.6, -12.0), (-1.6, -20.0), (X_MAX + 1.6, 20.0)]

FORMATION = np.array(
    [[X_MID, -31.0], [11.0, -20.0], [X_MID, -22.0], [41.5, -20.0], [9.0, -6.0], [X_MID, -9.0], [43.5, -6.0],
     [X_MID, 4.0]]
)
STAND, WALK, JOG, RUN, FAST, SPRINT = 0.3, 0.9, 2.2, 4.0, 5.6, 7.6


def unit(v: np.ndarray) -> np.ndarray:
    n = float(np.hypot(v[0], v[1]))
    return v / n if n > 1e-9 else np.array([1.0, 0.0])


class EngineState:
    """The state of ``Engine`` (``simulator/rplay.py``) for one half, and where the ball is."""

    #: Set by ``Engine.run`` and the restarts (``simulator/rplay.py``), and by the touches that pick a receiver:
    #: the players going for the ball this step, the spot of the next restart, whom the last touch was meant for.
    chasers_now: dict[int, tuple[float, np.ndarray]]
    restart_spot: np.ndarray
    _next_receiver: int

    def __init__(self, rng: np.random.Generator, play_len: float, lead: float, attack_a: int,
                 balls: tuple[int, ...], kickoff_team: int) -> None:
        self.rng = rng
        self.play_len = play_len
        self.t0 = -lead
        self.n = math.ceil((play_len + 2 * lead) / DT) + 2
        ne = len(ENTITIES)
        self.pos = np.zeros((ne, self.n, 2))
        self.vel = np.zeros((ne, self.n, 2))
        self.attack_a = attack_a
        self.sign = np.array([attack_a if e < 8 else -attack_a for e in range(N_PLAYERS)] + [0], dtype=float)
        self.balls = balls
        self.active = balls[0]
        self.tracks: dict[int, list[rball.Seg]] = {}
        for b, spot in zip(balls[1:], SPARE_SPOTS, strict=False):
            self.tracks[b] = [rball.Seg(self.t0 - 1, rball.REST, np.array([*spot, rball.R]), np.zeros(3))]
        self.tracks[self.active] = [rball.Seg(self.t0 - 1, rball.REST, np.array([X_MID, 0.0, rball.R]),
                                              np.zeros(3))]
        self.touches: list[Touch] = []
        self.stops: list[Stop] = []
        self.owner = -1  # last player to touch
        self.team = kickoff_team  # team in possession (0 A, 1 B)
        self.receiver = -1
        self.last_touch_t = np.full(ne, -1e9)
        self.state = "restart"
        self.restart_t = 0.0
        self.restart_ent = 7 if kickoff_team == 0 else 15
        self.restart_kind = "kickoff"
        self.stop_start = 0.0
        self.holder = -1
        self.hold_until = 0.0
        self.dribbles = 0
        self.ep_end = np.zeros(ne)
        self.ep_speed = np.full(ne, WALK)
        self.ep_off = np.zeros((ne, 2))
        self.sprint_end = np.zeros(ne)
        self.sprints = 0
        self.no_deflect: set[tuple[int, int]] = set()
        self.n_touch_at_check = 0
        self.whistle_at = math.inf
        self.ball_entered = True  # False from a throw-in until the ball is on the pitch
        self._arr_key: tuple | None = None
        self._arr: dict[str, np.ndarray] = {}
        self._fut_key: tuple | None = None
        self._fut: tuple[np.ndarray, np.ndarray] = (np.zeros(0), np.zeros((0, 3)))

    # ---------------------------------------------------------------- geometry helpers
    def team_of(self, e: int) -> int:
        return 0 if e < 8 else 1

    def goal_side(self, e: int) -> int:
        """+1/-1: the goal line that player ``e`` attacks."""
        return int(self.sign[e])

    def own_box(self, e: int, p: np.ndarray) -> bool:
        side = -self.goal_side(e)
        return abs(p[1] - GOAL_Y[side]) < 16.5 and 10.0 < p[0] < X_MAX - 10.0

    def world(self, e: int, xy: np.ndarray) -> np.ndarray:
        return np.array([xy[0], xy[1] * self.sign[e]])

    def ball_state(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        if self.holder >= 0 and self.state == "held":
            j = min(int((t - self.t0) / DT), self.n - 1)
            p = self.pos[self.holder, j]
            return np.array([p[0], p[1] + 0.3 * self.goal_side(self.holder), 1.0]), np.zeros(3)
        pos, vel, _, _ = rball.eval_at(self.arr(), np.array([t]))
        return pos[0], vel[0]

    def arr(self) -> dict[str, np.ndarray]:
        """Column arrays of the active ball's track (cached until the track changes)."""
        tr = self.tracks[self.active]
        key = (self.active, id(tr), len(tr))
        if self._arr_key != key:
            self._arr_key, self._arr = key, rball.seg_arrays(tr)
        return self._arr

    def ball_future(self, t: float, horizon: float = 4.0, step: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
        key = (t, self._arr_key)
        if self._fut_key != key:
            times = t + np.arange(0, int(horizon / step) + 1) * step
            pos, _, _, _ = rball.eval_at(self.arr(), times)
            self._fut_key, self._fut = key, (times, pos)
        return self._fut
