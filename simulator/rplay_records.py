"""What the realistic play engine (``simulator/rplay.py``) produces for a half: touches, stops, ball tracks.

The sampler (``simulator/rsample.py``) and the truth (``simulator/rtruth.py``) read these records.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simulator import rball
from simulator.motion import Knots


@dataclass
class Touch:
    """One contact of a player with the ball."""

    t: float  # s since kick-off
    ent: int
    ball: int
    part: str  # foot, head, hands
    kind: str  # pass, dribble, shot, clear, cross, header, catch, parry, deflection, restart, control, punt, tackle
    leg: int = 0  # 0 left, 1 right (foot touches)
    pos: np.ndarray = field(default_factory=lambda: np.zeros(3))
    dv: np.ndarray = field(default_factory=lambda: np.zeros(3))
    contact_s: float = 0.01
    v_out: np.ndarray = field(default_factory=lambda: np.zeros(3))


@dataclass
class Stop:
    start: float  # play stops (ball out, whistle)
    end: float  # restart touch
    kind: str


@dataclass
class Played:
    """What one half produced."""

    knots: Knots
    touches: list[Touch]
    stops: list[Stop]
    tracks: dict[int, list[rball.Seg]]
    sprints: int = 0
