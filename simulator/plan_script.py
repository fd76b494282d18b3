"""The play script pass 1 writes (``simulator/plan.py``): its kicks and stops, and the half that holds them.

Pass 2 (``simulator/ball.py``) and the samplers (``simulator/sampling.py``, ``simulator/truth.py``) read
these records; the planner that fills them in is not needed for that.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simulator.debs import BALL_PERIOD_PS, PS_PER_S
from simulator.motion import Knots


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
