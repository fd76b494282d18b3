"""Ball-path geometry shared by the play planner and the ground truth.

A kicked ball moves in a straight line with constant deceleration ``d``
(rolling resistance and drag) and, if lofted, a ballistic height. Both the
planner (to pick passes that are not shots) and the truth (to classify shots)
use these same functions, so the two always agree.
"""

from __future__ import annotations

import math

import numpy as np

from simulator.debs import GOAL_X, GOAL_Y, GOAL_Z, X_MAX, X_MIN, Y_MAX, Y_MIN

GRAVITY = 9.81
ROLL_DECEL = 1.2  # m/s^2, default deceleration of a rolling ball
SHOT_HORIZON = 1.5  # s, DESIGN Q4


def unit(v: np.ndarray) -> np.ndarray:
    n = float(np.hypot(v[0], v[1]))
    return v / n if n > 1e-12 else np.array([1.0, 0.0])


def roll_params(distance: float, duration: float, decel: float = ROLL_DECEL) -> tuple[float, float]:
    """Launch speed and deceleration that cover ``distance`` in exactly ``duration``."""
    if duration <= 0:
        return 0.0, 0.0
    d = min(decel, distance / duration**2)
    return distance / duration + d * duration / 2, d


def travel(u: float, d: float, tau: float) -> float:
    """Distance rolled after ``tau`` seconds (the ball stops, it never rolls back)."""
    if d <= 0:
        return u * tau
    tau = min(tau, u / d)
    return u * tau - 0.5 * d * tau * tau


def time_to_cover(u: float, d: float, s: float) -> float | None:
    """Seconds until distance ``s`` is reached, or None if the ball stops first."""
    if s <= 0:
        return 0.0
    if d <= 0:
        return s / u if u > 0 else None
    disc = u * u - 2 * d * s
    if disc < 0:
        return None
    return (u - math.sqrt(disc)) / d


def exit_distance(start: np.ndarray, direction: np.ndarray) -> float:
    """Distance along ``direction`` from ``start`` (inside the pitch) to the pitch boundary."""
    best = math.inf
    for axis, lo, hi in ((0, X_MIN, X_MAX), (1, Y_MIN, Y_MAX)):
        c = direction[axis]
        if c > 1e-12:
            best = min(best, (hi - start[axis]) / c)
        elif c < -1e-12:
            best = min(best, (lo - start[axis]) / c)
    return best


def goal_entry_time(
    start: np.ndarray,
    direction: np.ndarray,
    u: float,
    d: float,
    vz: float,
    g: float,
    side: int,
    x_margin: float = 0.0,
) -> float | None:
    """When the ball path crosses the goal mouth at ``GOAL_Y[side]``, or None.

    ``start`` is (x, y, z); ``x_margin`` widens (positive) or narrows (negative)
    the mouth, so callers can ask "clearly in" or "clearly out".
    """
    if direction[1] * side <= 1e-12:
        return None
    s = (GOAL_Y[side] - start[1]) / direction[1]
    tau = time_to_cover(u, d, s)
    if tau is None:
        return None
    x = start[0] + direction[0] * s
    z = start[2] + vz * tau - 0.5 * g * tau * tau
    x0, x1 = GOAL_X[side]
    if x0 - x_margin < x < x1 + x_margin and z < GOAL_Z:
        return tau
    return None
