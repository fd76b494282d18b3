"""Smooth body motion from knots, and where each worn sensor sits on the body.

Players are simulated at 10 Hz (position and velocity knots); cubic Hermite
interpolation between knots keeps position and velocity continuous at 200 Hz,
and bounds speed by the knot speeds. Sensors are then placed relative to the
body: legs beside it with an antiphase gait swing (so the two legs average to
the body), hands higher and wider for goalkeepers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LEG_LATERAL = 0.12  # m, half the stance width
HAND_LATERAL = 0.35
LEG_Z = 0.20  # shin-guard height
HAND_Z = 1.00
GAIT_AMPLITUDE = 0.04  # m at full stride
MAX_TURN_RATE = 4.0  # rad/s, limits how fast sensors swing around the body
KIND_INDEX = {"legL": 0, "legR": 1, "handL": 2, "handR": 3}
_LATERAL = np.array([LEG_LATERAL, -LEG_LATERAL, HAND_LATERAL, -HAND_LATERAL])
_SWING = np.array([1.0, -1.0, -1.0, 1.0])  # arms swing against the legs
_BASE_Z = np.array([LEG_Z, LEG_Z, HAND_Z, HAND_Z])
FD_STEP = 0.002  # s, finite-difference step for sensor velocity/acceleration


@dataclass
class Knots:
    """Motion of every entity on a uniform time grid (seconds relative to kick-off)."""

    t0: float
    dt: float
    pos: np.ndarray  # (E, N, 2) metres
    vel: np.ndarray  # (E, N, 2) m/s
    heading: np.ndarray | None = None  # (E, N) rad, unwrapped
    phase: np.ndarray | None = None  # (E, N) gait phase, rad
    amp: np.ndarray | None = None  # (E, N) gait amplitude, m

    def finish(self, initial_heading: np.ndarray) -> None:
        """Derive heading, gait phase and gait amplitude from the velocity knots."""
        n_ent, n = self.pos.shape[:2]
        speed = np.hypot(self.vel[..., 0], self.vel[..., 1])
        heading = np.empty((n_ent, n))
        h = initial_heading.astype(float).copy()
        step = MAX_TURN_RATE * self.dt
        angles = np.arctan2(self.vel[..., 1], self.vel[..., 0])
        for j in range(n):
            moving = speed[:, j] > 0.5
            diff = (angles[:, j] - h + np.pi) % (2 * np.pi) - np.pi
            h = h + np.where(moving, np.clip(diff, -step, step), 0.0)
            heading[:, j] = h
        cadence = 2 * np.pi * (1.0 + 0.22 * speed)
        phase = np.concatenate([np.zeros((n_ent, 1)), np.cumsum(cadence[:, :-1] * self.dt, axis=1)], axis=1)
        self.heading = heading
        self.phase = phase
        self.amp = GAIT_AMPLITUDE * np.minimum(1.0, speed / 1.5)

    def _locate(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = self.pos.shape[1]
        u = (t - self.t0) / self.dt
        k = np.clip(np.floor(u).astype(np.int64), 0, n - 2)
        s = np.clip(u - k, 0.0, 1.0)
        return k, s

    def body(self, ent: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Body centre (n, 2) of entities ``ent`` at times ``t``."""
        k, s = self._locate(t)
        return self._hermite(ent, k, s)

    def _hermite(self, ent: np.ndarray, k: np.ndarray, s: np.ndarray) -> np.ndarray:
        s2 = s * s
        s3 = s2 * s
        h00 = 2 * s3 - 3 * s2 + 1
        h10 = s3 - 2 * s2 + s
        h01 = -2 * s3 + 3 * s2
        h11 = s3 - s2
        p0 = self.pos[ent, k]
        p1 = self.pos[ent, k + 1]
        m0 = self.vel[ent, k] * self.dt
        m1 = self.vel[ent, k + 1] * self.dt
        return h00[:, None] * p0 + h10[:, None] * m0 + h01[:, None] * p1 + h11[:, None] * m1

    def sensor(self, ent: np.ndarray, kind: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sensor positions (n, 3) and the body heading vector (n, 2) at times ``t``."""
        assert self.heading is not None and self.phase is not None and self.amp is not None
        k, s = self._locate(t)
        body = self._hermite(ent, k, s)
        th = self.heading[ent, k] * (1 - s) + self.heading[ent, k + 1] * s
        ph = self.phase[ent, k] * (1 - s) + self.phase[ent, k + 1] * s
        amp = self.amp[ent, k] * (1 - s) + self.amp[ent, k + 1] * s
        fwd = np.stack([np.cos(th), np.sin(th)], axis=1)
        left = np.stack([-fwd[:, 1], fwd[:, 0]], axis=1)
        swing = amp * np.sin(ph) * _SWING[kind]
        xy = body + left * _LATERAL[kind][:, None] + fwd * swing[:, None]
        z = _BASE_Z[kind] + 0.5 * swing * (kind < 2)
        return np.column_stack([xy, z]), fwd

    def sensor_kinematics(
        self, ent: np.ndarray, kind: np.ndarray, t: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Position, velocity, acceleration (n, 3) by central differences, plus heading."""
        h = FD_STEP
        p, fwd = self.sensor(ent, kind, t)
        pm, _ = self.sensor(ent, kind, t - h)
        pp, _ = self.sensor(ent, kind, t + h)
        vel = (pp - pm) / (2 * h)
        acc = (pp - 2 * p + pm) / (h * h)
        return p, vel, acc, fwd
