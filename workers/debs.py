"""Facts about the DEBS 2013 match that the query components share (DESIGN §6).

Kept apart from ``simulator/``: detection code must not reuse the generator's
own tables, so a wrong fact there cannot hide a wrong detection here.
"""

from __future__ import annotations

from dataclasses import dataclass

PS_PER_S = 10**12
PS_PER_MS = 10**9

FIRST_HALF = (10753295594424116, 12557295594424116)
SECOND_HALF = (13086639146403495, 14879639146403495)
HALVES = (FIRST_HALF, SECOND_HALF)

# Pitch (mm): the match was played on a half-size pitch.
X_MIN, X_MAX = 0, 52483
Y_MIN, Y_MAX = -33960, 33965


@dataclass(frozen=True)
class GoalArea:
    y: int  # goal line (mm)
    x_min: float
    x_max: float
    z_max: int = 2440


GOAL_NORTH = GoalArea(33941, 22578.5, 29898.5)
GOAL_SOUTH = GoalArea(-33968, 22560.0, 29880.0)

BALLS_FIRST_HALF = (4, 8, 10)
BALLS_SECOND_HALF = (4, 8, 10, 12)
BALLS = BALLS_SECOND_HALF
REFEREE_SENSORS = (105, 106)

#: player -> (leg sensors..., hand sensors...) ; goalkeepers carry four sensors.
PLAYER_SENSORS: dict[str, tuple[int, ...]] = {
    "A1": (13, 14, 97, 98),
    "A2": (47, 16),
    "A3": (49, 88),
    "A4": (19, 52),
    "A5": (53, 54),
    "A6": (23, 24),
    "A7": (57, 58),
    "A8": (59, 28),
    "B1": (61, 62, 99, 100),
    "B2": (63, 64),
    "B3": (65, 66),
    "B4": (67, 68),
    "B5": (69, 38),
    "B6": (71, 40),
    "B7": (73, 74),
    "B8": (75, 44),
}
PLAYER_NAMES: dict[str, str] = {
    "A1": "Nick Gertje",
    "A2": "Dennis Dotterweich",
    "A3": "Niklas Waelzlein",
    "A4": "Wili Sommer",
    "A5": "Philipp Harlass",
    "A6": "Roman Hartleb",
    "A7": "Erik Engelhardt",
    "A8": "Sandro Schneider",
    "B1": "Leon Krapf",
    "B2": "Kevin Baer",
    "B3": "Luca Ziegler",
    "B4": "Ben Mueller",
    "B5": "Vale Reitstetter",
    "B6": "Christopher Lee",
    "B7": "Leon Heinze",
    "B8": "Leo Langhans",
}
PLAYERS = tuple(PLAYER_SENSORS)
TEAMS = ("A", "B")
REFEREE = "REFEREE"

SENSOR_OWNER: dict[int, str] = {sid: player for player, sids in PLAYER_SENSORS.items() for sid in sids}
SENSOR_OWNER.update({sid: REFEREE for sid in REFEREE_SENSORS})

#: Window name -> length in ps (None = whole game).
WINDOWS: dict[str, int | None] = {
    "1min": 60 * PS_PER_S,
    "5min": 5 * 60 * PS_PER_S,
    "10min": 10 * 60 * PS_PER_S,
    "20min": 20 * 60 * PS_PER_S,
    "wholeGame": None,
}


def sensor_stream(sid: int) -> str:
    return f"SENSOR{sid}"


def team_of(player: str) -> str:
    return player[0]


def in_pitch(x: float, y: float) -> bool:
    return X_MIN <= x <= X_MAX and Y_MIN <= y <= Y_MAX


def in_game(ts: int) -> bool:
    return any(start <= ts <= end for start, end in HALVES)


def half_of(ts: int) -> int:
    """1 or 2 for the half ``ts`` falls in or after the start of; 0 before kick-off."""
    if ts >= SECOND_HALF[0]:
        return 2
    return 1 if ts >= FIRST_HALF[0] else 0


def attacked_goal(team: str, half: int, team_a_attacks_north_first: bool = True) -> GoalArea:
    """The goal ``team`` shoots at; teams change ends at half time (DESIGN Q4 default)."""
    north = (team == "A") == team_a_attacks_north_first
    if half == 2:
        north = not north
    return GOAL_NORTH if north else GOAL_SOUTH


def speed_kmh(v_um_per_s: float) -> float:
    """|v| in µm/s as km/h."""
    return v_um_per_s * 3.6e-6
