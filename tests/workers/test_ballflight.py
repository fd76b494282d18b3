"""workers/ballflight.py against closed-form physics: the limits where drag does not matter, and what
drag, bounces and grass must do to a ball (only ever slow it)."""

from __future__ import annotations

import math

import pytest

from workers import ballflight
from workers.ballflight import GRAVITY, goal_line_crossing, straight_line_crossing

R = ballflight.BALL_RADIUS


def test_a_slow_lob_follows_the_vacuum_parabola() -> None:
    """At 3 m/s drag is under 1% of gravity: the ball lands where a vacuum parabola says (within 1%)."""
    vy, vz = 2.0, 2.2
    t_land = 2 * vz / GRAVITY
    crossing = goal_line_crossing((0.0, 0.0, R), (0.0, vy, vz), vy * t_land * 0.999, 5.0)
    assert crossing is not None
    t, _x, z = crossing
    assert t == pytest.approx(t_land * 0.999, rel=0.01)
    assert z == pytest.approx(R, abs=0.02)


def test_a_slow_roll_stops_where_rolling_resistance_says() -> None:
    """At 1 m/s along the ground drag is under 2% of the rolling resistance: it stops short of v²/(2 c g) by ~1%."""
    v = 1.0
    stop = v * v / (2 * ballflight.ROLLING_RESISTANCE * GRAVITY)
    assert goal_line_crossing((0.0, 0.0, R), (0.0, v, 0.0), stop * 0.97, 10.0) is not None
    assert goal_line_crossing((0.0, 0.0, R), (0.0, v, 0.0), stop * 1.001, 10.0) is None


@pytest.mark.parametrize("speed,elevation", [(15.0, 0.0), (22.0, 8.0), (28.0, 15.0), (30.0, 30.0)])
def test_drag_only_ever_delays_the_ball(speed: float, elevation: float) -> None:
    """The straight, drag-free projection is a lower bound on the time to the line; the ball never gains speed."""
    e = math.radians(elevation)
    velocity = (3.0, speed * math.cos(e), speed * math.sin(e))
    line = 25.0
    physical = goal_line_crossing((10.0, 0.0, R), velocity, line, 5.0)
    straight = straight_line_crossing((10.0, 0.0, R), velocity, line, 5.0)
    assert physical is not None and straight is not None
    assert physical[0] > straight[0]
    assert physical[1] == pytest.approx(straight[1], abs=1e-6)  # no side force: the same line over the ground


def test_a_bounce_loses_height_and_speed() -> None:
    """A ball dropped on grass rebounds lower; one that lands moving forward leaves it slower."""
    vz_land = -5.0
    vx, vy, vz = ballflight._bounce(0.0, 10.0, vz_land)
    assert 0 < vz < -vz_land and vx == 0.0
    assert 0 < vy < 10.0


def test_balls_moving_away_or_too_late_never_cross() -> None:
    assert goal_line_crossing((0.0, 0.0, R), (0.0, -20.0, 0.0), 30.0, 1.5) is None
    assert goal_line_crossing((0.0, 0.0, R), (5.0, 0.0, 0.0), 30.0, 1.5) is None
    assert goal_line_crossing((0.0, 0.0, R), (0.0, 10.0, 0.0), 30.0, 1.5) is None  # 3 s away
    assert goal_line_crossing((0.0, 40.0, R), (0.0, -20.0, 0.0), 30.0, 1.5) is not None  # the other way
