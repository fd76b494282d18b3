"""Where a struck ball goes next: flight with air drag, bounces on grass, then rolling.

Why: Q4 asks whether a kicked ball reaches the goal within 1.5 s. A straight
line at constant speed gets that wrong for the shots that matter most: a
25 m/s shot from 28 m loses about a fifth of its speed to the air on the way,
and a ball that bounces in front of the goal loses more at the bounce. The shot
detector (workers/shots.py) and its batch reference (workers/reference_q4.py)
both project with :func:`goal_line_crossing`.

The constants are textbook values for a size-5 ball on natural grass, chosen
from the physics literature and the Laws of the Game, not fitted to any data:

- mass 0.43 kg and radius 0.11 m (Laws of the Game: 410-450 g, 68-70 cm
  around); air density 1.2 kg/m³;
- drag coefficient 0.2: kicked balls fly above the drag crisis, where wind
  tunnel measurements of match balls give roughly 0.15-0.3 (a hard shot
  loses about a fifth of its speed in a second);
- a bounce keeps 0.6 of the vertical speed (rebound of a ball dropped on
  grass), and grass grips the ball with a friction coefficient of 0.5: the
  ball slides and loses ``0.5 * (1 + 0.6) * |vz|`` of its horizontal speed,
  but never more than a thin shell that starts to roll would (it keeps 3/5,
  from its moment of inertia 2/3 m r²);
- rolling resistance on grass 0.06 (a deceleration of 0.06 g), plus drag.

The path is stepped numerically (2 ms, midpoint rule): about a thousand
arithmetic steps per decision, once per hit.
"""

from __future__ import annotations

import math

GRAVITY = 9.81  # m/s²
BALL_MASS = 0.43  # kg
BALL_RADIUS = 0.11  # m: the sensor sits at the ball's centre, this high when the ball is on the ground
AIR_DENSITY = 1.2  # kg/m³
DRAG_COEFFICIENT = 0.2
#: Drag deceleration per squared speed: F / m = DRAG_PER_M * |v|² (1/m).
DRAG_PER_M = 0.5 * AIR_DENSITY * DRAG_COEFFICIENT * math.pi * BALL_RADIUS**2 / BALL_MASS
RESTITUTION = 0.6
GRASS_FRICTION = 0.5
ROLLING_KEEP = 0.6  # horizontal speed kept by a thin shell that grips and rolls away
ROLLING_RESISTANCE = 0.06
#: A rebound slower than this (m/s) rises less than 5 mm: the ball rolls from there.
MIN_BOUNCE = math.sqrt(2 * GRAVITY * 0.005)
STEP_S = 0.002


def _acceleration(vx: float, vy: float, vz: float, rolling: bool) -> tuple[float, float, float]:
    speed = math.sqrt(vx * vx + vy * vy + vz * vz)
    drag = DRAG_PER_M * speed
    ax, ay, az = -drag * vx, -drag * vy, -drag * vz
    if not rolling:
        return ax, ay, az - GRAVITY
    ground = math.hypot(vx, vy)
    if ground > 0:
        friction = ROLLING_RESISTANCE * GRAVITY / ground
        ax, ay = ax - friction * vx, ay - friction * vy
    return ax, ay, 0.0


def _bounce(vx: float, vy: float, vz: float) -> tuple[float, float, float]:
    """Velocity after the ball lands with ``vz`` < 0."""
    ground = math.hypot(vx, vy)
    if ground > 0:
        kept = max(ROLLING_KEEP * ground, ground - GRASS_FRICTION * (1 + RESTITUTION) * -vz) / ground
        vx, vy = vx * kept, vy * kept
    up = -vz * RESTITUTION
    return vx, vy, (up if up >= MIN_BOUNCE else 0.0)


def goal_line_crossing(position: tuple[float, float, float], velocity: tuple[float, float, float],
                       line_y: float, horizon_s: float) -> tuple[float, float, float] | None:
    """First crossing of the plane y = ``line_y`` within ``horizon_s``: (seconds, x, z), or None.

    ``position`` (m) is the ball's centre, ``velocity`` in m/s; nobody touches the ball on the way.
    """
    x, y, z = position
    vx, vy, vz = velocity
    side = math.copysign(1.0, line_y - y)
    if vy * side <= 0:
        return None  # not moving toward the line (a ball only slows down on its own)
    z = max(z, BALL_RADIUS)
    rolling = z <= BALL_RADIUS and vz <= 0
    if rolling:
        vz = 0.0
    t, h = 0.0, STEP_S
    while t < horizon_s:
        if rolling and vx * vx + vy * vy < (ROLLING_RESISTANCE * GRAVITY * h) ** 2:
            return None  # at rest before the line
        ax, ay, az = _acceleration(vx, vy, vz, rolling)
        mx, my, mz = vx + ax * h / 2, vy + ay * h / 2, vz + az * h / 2
        ax, ay, az = _acceleration(mx, my, mz, rolling)
        nx, ny, nz = x + mx * h, y + my * h, z + mz * h
        if (ny - line_y) * side >= 0:
            f = (line_y - y) / (ny - y)
            return t + f * h, x + f * (nx - x), max(BALL_RADIUS, z + f * (nz - z))
        x, y, z = nx, ny, nz
        vx, vy, vz = vx + ax * h, vy + ay * h, vz + az * h
        t += h
        if not rolling and z <= BALL_RADIUS and vz < 0:
            z = BALL_RADIUS
            vx, vy, vz = _bounce(vx, vy, vz)
            rolling = vz == 0.0
    return None


def straight_line_crossing(position: tuple[float, float, float], velocity: tuple[float, float, float],
                           line_y: float, horizon_s: float) -> tuple[float, float, float] | None:
    """The same question for a ball at constant horizontal speed that falls under gravity to the ground.

    No drag and no bounce losses: the DEBS challenge's literal reading, kept for comparison
    (``flight: straight`` in the shot detector).
    """
    x, y, z = position
    vx, vy, vz = velocity
    if vy == 0 or (line_y - y) / vy < 0:
        return None
    t = (line_y - y) / vy
    if t > horizon_s:
        return None
    return t, x + vx * t, max(0.0, z + vz * t - GRAVITY * t * t / 2)
