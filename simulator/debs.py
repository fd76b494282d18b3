"""Facts of the DEBS 2013 scenario that the generator must reproduce (DESIGN §6).

Kept in one place so the generator and its tests agree on sensor ids, rates,
game times and pitch geometry; detection code must not import from here.
"""

from __future__ import annotations

from dataclasses import dataclass

PS_PER_S = 10**12

# Game time, picoseconds.
HALF1 = (10753295594424116, 12557295594424116)
HALF2 = (13086639146403495, 14879639146403495)

# Sample periods, picoseconds.
PLAYER_PERIOD_PS = 5 * 10**9  # 200 Hz
BALL_PERIOD_PS = 5 * 10**8  # 2000 Hz

# Pitch and goals, metres (the CSV uses millimetres).
X_MIN, X_MAX = 0.0, 52.483
Y_MIN, Y_MAX = -33.960, 33.965
X_MID = (X_MIN + X_MAX) / 2
GOAL_Y = {+1: 33.941, -1: -33.968}
GOAL_X = {+1: (22.5785, 29.8985), -1: (22.560, 29.880)}
GOAL_Z = 2.440
BALL_RADIUS = 0.11

BALLS_HALF1 = (4, 8, 10)
BALLS_HALF2 = (4, 8, 10, 12)
REFEREE_SENSORS = (105, 106)


@dataclass(frozen=True)
class Entity:
    """Someone on the pitch who wears sensors: a player or the referee."""

    name: str
    team: str  # "A", "B" or "" for the referee
    sensors: tuple[tuple[int, str], ...]  # (sid, kind); kind in legL, legR, handL, handR

    @property
    def is_keeper(self) -> bool:
        return self.name in ("A1", "B1")


def _player(name: str, *sids: int) -> Entity:
    kinds = ("legL", "legR", "handL", "handR")
    return Entity(name, name[0], tuple(zip(sids, kinds, strict=False)))


ENTITIES: tuple[Entity, ...] = (
    _player("A1", 13, 14, 97, 98),
    _player("A2", 47, 16),
    _player("A3", 49, 88),
    _player("A4", 19, 52),
    _player("A5", 53, 54),
    _player("A6", 23, 24),
    _player("A7", 57, 58),
    _player("A8", 59, 28),
    _player("B1", 61, 62, 99, 100),
    _player("B2", 63, 64),
    _player("B3", 65, 66),
    _player("B4", 67, 68),
    _player("B5", 69, 38),
    _player("B6", 71, 40),
    _player("B7", 73, 74),
    _player("B8", 75, 44),
    Entity("REF", "", ((105, "legL"), (106, "legR"))),
)
N_PLAYERS = 16
REF_INDEX = 16


def inside_pitch(x: float, y: float) -> bool:
    """True when a point (metres) lies on the pitch, lines included."""
    return X_MIN <= x <= X_MAX and Y_MIN <= y <= Y_MAX
