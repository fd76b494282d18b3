"""Ball physics of the realistic generator: flight, bounce, roll, rest.

A kicked ball is a chain of analytic segments. In the air it feels gravity and
linear air drag (closed form); at the ground it bounces (restitution and
grass friction) until the bounce is too small, then rolls with rolling
friction plus drag until it stops. A goal net or the advertising boards take
most of its speed. Nothing here knows any detector: the ball's path is only
physics, so whatever a query sees in it is what a real ball would show.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.debs import GOAL_X, GOAL_Y, GOAL_Z, X_MAX, X_MIN, Y_MAX, Y_MIN

R = 0.11  # m, ball radius (height of its centre at rest)
G = 9.81
K_AIR = 0.22  # 1/s, linear drag in flight
K_ROLL = 0.12  # 1/s, drag while rolling
C_ROLL = 0.55  # m/s^2, rolling friction on grass
RESTITUTION = 0.55
GRASS_KEEP = 0.82  # share of horizontal speed kept at a bounce
MIN_BOUNCE = 1.0  # m/s, a smaller bounce becomes rolling
BOARDS = 4.0  # m beyond the lines
NET_KEEP = 0.12
SCAN_DT = 0.002

REST, FLY, ROLL, HELD, CARRY = 0, 1, 2, 3, 4


@dataclass
class Seg:
    """One analytic piece of a ball's path, valid from ``t0`` until the next segment."""

    t0: float
    kind: int
    p0: np.ndarray  # (3,)
    v0: np.ndarray  # (3,)
    ent: int = -1  # HELD: entity holding it
    end: np.ndarray | None = None  # CARRY: destination
    length: float = 1.0  # CARRY: duration


def eval_segs(kind: np.ndarray, tau: np.ndarray, p0: np.ndarray, v0: np.ndarray, end: np.ndarray,
              length: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Position, velocity, acceleration (n, 3) of segments at ``tau`` seconds into them (HELD: zeros)."""
    n = len(tau)
    pos = p0.copy()
    vel = np.zeros((n, 3))
    acc = np.zeros((n, 3))
    m = kind == FLY
    if m.any():
        t, v = tau[m], v0[m]
        vt = np.array([0.0, 0.0, -G / K_AIR])
        e = np.exp(-K_AIR * t)[:, None]
        pos[m] = p0[m] + vt * t[:, None] + (v - vt) * (1 - e) / K_AIR
        vel[m] = vt + (v - vt) * e
        acc[m] = -K_AIR * (v - vt) * e
    m = kind == ROLL
    if m.any():
        t, v = tau[m], v0[m]
        s0 = np.hypot(v[:, 0], v[:, 1])
        d = np.where(s0[:, None] > 1e-9, v[:, :2] / np.maximum(s0, 1e-9)[:, None], 0.0)
        ck = C_ROLL / K_ROLL
        q = s0 + ck
        t_stop = np.log(q / ck) / K_ROLL
        th = np.minimum(t, t_stop)
        e = np.exp(-K_ROLL * th)
        s = q * (1 - e) / K_ROLL - ck * th
        sp = np.maximum(q * e - ck, 0.0)
        a = np.where(t < t_stop, -K_ROLL * q * e, 0.0)
        pos[m, :2] = p0[m, :2] + d * s[:, None]
        pos[m, 2] = p0[m, 2]
        vel[m, :2] = d * sp[:, None]
        acc[m, :2] = d * a[:, None]
    m = kind == CARRY
    if m.any():
        ln = length[m]
        f = np.clip(tau[m] / ln, 0.0, 1.0)
        span = end[m] - p0[m]
        moving = (f < 1.0)[:, None]
        pos[m] = p0[m] + span * ((1 - np.cos(np.pi * f)) / 2)[:, None]
        vel[m] = np.where(moving, span * (np.pi / (2 * ln) * np.sin(np.pi * f))[:, None], 0.0)
        acc[m] = np.where(moving, span * ((np.pi / ln) ** 2 / 2 * np.cos(np.pi * f))[:, None], 0.0)
    return pos, vel, acc


def seg_arrays(segs: list[Seg]) -> dict[str, np.ndarray]:
    """Column arrays of a ball's segments, for vectorised evaluation."""
    return {
        "t0": np.array([s.t0 for s in segs]),
        "kind": np.array([s.kind for s in segs], dtype=np.int64),
        "p0": np.array([s.p0 for s in segs]).reshape(-1, 3),
        "v0": np.array([s.v0 for s in segs]).reshape(-1, 3),
        "ent": np.array([s.ent for s in segs], dtype=np.int64),
        "end": np.array([s.end if s.end is not None else s.p0 for s in segs]).reshape(-1, 3),
        "length": np.array([s.length for s in segs]),
    }


def eval_at(arr: dict[str, np.ndarray], t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """State at times ``t`` and the segment index used (HELD rows come back zero: the caller fills them)."""
    i = np.maximum(np.searchsorted(arr["t0"], t, side="right") - 1, 0)
    tau = np.maximum(t - arr["t0"][i], 0.0)
    pos, vel, acc = eval_segs(arr["kind"][i], tau, arr["p0"][i], arr["v0"][i], arr["end"][i], arr["length"][i])
    return pos, vel, acc, i


def _one(kind: int, p: np.ndarray, v: np.ndarray, taus: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = len(taus)
    pos, vel, _ = eval_segs(np.full(n, kind), taus, np.tile(p, (n, 1)), np.tile(v, (n, 1)),
                            np.tile(p, (n, 1)), np.ones(n))
    return pos, vel


def _in_mouth(x: float, z: float, side: int) -> bool:
    return GOAL_X[side][0] < x < GOAL_X[side][1] and z < GOAL_Z


def free_path(t0: float, p: np.ndarray, v: np.ndarray, horizon: float = 30.0) -> list[Seg]:
    """The ball's path from state (p, v) at ``t0`` with nobody touching it, ending at rest."""
    segs: list[Seg] = []
    t, p, v = t0, np.array(p, float), np.array(v, float)
    in_net = False
    for _ in range(40):
        if t - t0 > horizon:
            break
        speed = float(np.linalg.norm(v))
        if p[2] <= R + 1e-6 and speed < 0.05:
            break
        kind = FLY if (p[2] > R + 1e-3 or v[2] > 1e-3) else ROLL
        if kind == ROLL:
            p[2], v[2] = R, 0.0
        segs.append(Seg(t, kind, p.copy(), v.copy()))
        taus = np.arange(1, 4001) * SCAN_DT
        pos, vel = _one(kind, p, v, taus)
        event = np.zeros(len(taus), dtype=bool)
        if kind == FLY:
            event |= (pos[:, 2] <= R) & (vel[:, 2] < 0)
        else:
            event |= np.hypot(vel[:, 0], vel[:, 1]) <= 1e-6
        y_prev = np.concatenate([[p[1]], pos[:-1, 1]])
        goal = np.zeros(len(taus), dtype=bool)
        if not in_net:
            cross_n = (y_prev < GOAL_Y[+1]) & (pos[:, 1] >= GOAL_Y[+1])
            cross_s = (y_prev > GOAL_Y[-1]) & (pos[:, 1] <= GOAL_Y[-1])
            goal = cross_n | cross_s
        boards = (pos[:, 0] < X_MIN - BOARDS) | (pos[:, 0] > X_MAX + BOARDS) | (pos[:, 1] < Y_MIN - BOARDS) | (
            pos[:, 1] > Y_MAX + BOARDS)
        hits = np.nonzero(event | goal | boards)[0]
        if len(hits) == 0:
            t, p, v = t + taus[-1], pos[-1], vel[-1]
            continue
        j = int(hits[0])
        t, p, v = t + float(taus[j]), pos[j].copy(), vel[j].copy()
        if goal[j]:
            side = 1 if p[1] > 0 else -1
            if _in_mouth(p[0], p[2], side):
                in_net = True
                v *= NET_KEEP
            continue
        if boards[j]:
            if p[0] < X_MIN - BOARDS or p[0] > X_MAX + BOARDS:
                v[0] *= -0.3
            if p[1] < Y_MIN - BOARDS or p[1] > Y_MAX + BOARDS:
                v[1] *= -0.3
            v[:2] *= 0.5
            continue
        if kind == FLY:
            p[2] = R
            keep = 0.5 if in_net else GRASS_KEEP
            v[:2] *= keep
            v[2] = -v[2] * RESTITUTION
            if v[2] < MIN_BOUNCE:
                v[2] = 0.0
            continue
        break  # rolled to a stop
    segs.append(Seg(t, REST, np.array([p[0], p[1], R]), np.zeros(3)))
    return segs


def path_states(segs: list[Seg], times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions and velocities of a free path (no HELD pieces) at ``times``."""
    pos, vel, _, _ = eval_at(seg_arrays(segs), times)
    return pos, vel


def goal_crossing(segs: list[Seg], t0: float, side: int, horizon: float) -> tuple[float, float, float] | None:
    """First crossing of the goal line plane ``GOAL_Y[side]`` within ``horizon`` s: (tau, x, z), or None."""
    taus = np.arange(0, int(horizon / 0.001) + 1) * 0.001
    pos, _ = path_states(segs, t0 + taus)
    y = pos[:, 1]
    crossed = (y >= GOAL_Y[side]) if side > 0 else (y <= GOAL_Y[side])
    idx = np.nonzero(crossed)[0]
    if len(idx) == 0 or idx[0] == 0:
        return None
    j = int(idx[0])
    f = (GOAL_Y[side] - y[j - 1]) / (y[j] - y[j - 1])
    x = pos[j - 1, 0] + f * (pos[j, 0] - pos[j - 1, 0])
    z = pos[j - 1, 2] + f * (pos[j, 2] - pos[j - 1, 2])
    return float(taus[j - 1] + f * 0.001), float(x), float(z)


def boundary_exit(arr: dict[str, np.ndarray], t0: float, t1: float, entered: bool = True) -> float | None:
    """First instant in [t0, t1] at which the path (``seg_arrays``) is outside the pitch lines, or None.

    ``entered`` False: the ball starts outside (a throw-in is taken from beyond the touchline) and
    can only leave the pitch after it has been inside.
    """
    n = max(2, int((t1 - t0) / 0.001) + 1)
    times = np.linspace(t0, t1, n)
    pos, _, _, _ = eval_at(arr, times)
    out = (pos[:, 0] < X_MIN) | (pos[:, 0] > X_MAX) | (pos[:, 1] < Y_MIN) | (pos[:, 1] > Y_MAX)
    if not entered:
        inside = np.nonzero(~out)[0]
        out[: inside[0] if len(inside) else n] = False
    idx = np.nonzero(out)[0]
    return float(times[idx[0]]) if len(idx) else None
