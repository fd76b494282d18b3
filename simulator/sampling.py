"""Sensor rows for a time slice: every sensor at its own rate and phase.

A slice is independent of every other slice (its noise is seeded by the slice
start), so slices can be computed in parallel and concatenated in time order
and still give identical bytes.
"""

from __future__ import annotations

import numpy as np

from simulator.ball import MOVE, SPIKE_S
from simulator.debs import BALL_PERIOD_PS, ENTITIES, PLAYER_PERIOD_PS, PS_PER_S
from simulator.motion import KIND_INDEX
from simulator.plan_script import Session

UNIT = 10_000
NOISE_A = 0.25  # m/s^2, accelerometer noise of a ball between kicks
NON_KICK_A_MAX = 50.0  # m/s^2, keeps noise clear of the 55 m/s^2 hit threshold


def sample_times(base: int, phase: int, period: int, lo: int, hi: int) -> np.ndarray:
    """Sample instants base+phase+n*period within [lo, hi), ps."""
    origin = base + phase
    n0 = -((origin - lo) // period)
    n1 = -((origin - hi) // period)
    return origin + np.arange(max(n0, 0), max(n1, 0), dtype=np.int64) * period


def _units(vec: np.ndarray, fallback: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mag = np.linalg.norm(vec, axis=1)
    ok = mag > 1e-9
    unit = np.where(ok[:, None], vec / np.where(ok, mag, 1.0)[:, None], fallback)
    return mag, unit


def _rows(sid: np.ndarray, ts: np.ndarray, pos: np.ndarray, vmag: np.ndarray, amag: np.ndarray,
          vdir: np.ndarray, adir: np.ndarray) -> np.ndarray:
    out = np.empty((len(ts), 13), dtype=np.int64)
    out[:, 0] = sid
    out[:, 1] = ts
    out[:, 2:5] = np.rint(pos * 1000.0)
    out[:, 5] = np.rint(vmag * 1e6)
    out[:, 6] = np.rint(amag * 1e6)
    out[:, 7:10] = np.rint(vdir * UNIT)
    out[:, 10:13] = np.rint(adir * UNIT)
    return out


def player_rows(session: Session, lo: int, hi: int) -> np.ndarray:
    knots = session.knots
    assert knots is not None
    sids, ents, kinds, times = [], [], [], []
    for e, ent in enumerate(ENTITIES):
        for sid, kind in ent.sensors:
            ts = sample_times(session.base_ps, session.player_phase[sid], PLAYER_PERIOD_PS, lo, hi)
            times.append(ts)
            sids.append(np.full(len(ts), sid))
            ents.append(np.full(len(ts), e))
            kinds.append(np.full(len(ts), KIND_INDEX[kind]))
    ts = np.concatenate(times)
    t = (ts - session.ko_ps).astype(np.float64) / PS_PER_S
    pos, vel, acc, fwd = knots.sensor_kinematics(np.concatenate(ents), np.concatenate(kinds), t)
    fallback = np.column_stack([fwd, np.zeros(len(t))])
    vmag, vdir = _units(vel, fallback)
    amag, adir = _units(acc, fallback)
    return _rows(np.concatenate(sids), ts, pos, vmag, amag, vdir, adir)


def ball_rows(session: Session, arrays: dict[str, np.ndarray], sid: int, lo: int, hi: int,
              rng: np.random.Generator) -> np.ndarray:
    ts = sample_times(session.base_ps, session.ball_phase[sid], BALL_PERIOD_PS, lo, hi)
    t = (ts - session.ko_ps).astype(np.float64) / PS_PER_S
    a = arrays
    i = np.maximum(np.searchsorted(a["t0"], t, side="right") - 1, 0)
    tau = t - a["t0"][i]
    start, direction = a["start"][i], a["dir"][i]
    u, d, vz, g = a["u"][i], a["d"][i], a["vz"][i], a["g"][i]
    rolling = d > 0
    t_end = np.where(rolling, u / np.where(rolling, d, 1.0), np.inf)
    tau_h = np.minimum(tau, t_end)
    s = u * tau_h - 0.5 * d * tau_h**2
    sp = u - d * tau_h
    pos = np.column_stack([start[:, :2] + direction * s[:, None], start[:, 2] + vz * tau - 0.5 * g * tau**2])
    vel = np.column_stack([direction * sp[:, None], vz - g * tau])
    acc = np.column_stack([-direction * np.where(tau < t_end, d, 0.0)[:, None], np.zeros(len(t))])
    mv = a["kind"][i] == MOVE
    if mv.any():
        length = a["length"][i][mv]
        f = np.clip(tau[mv] / length, 0.0, 1.0)
        span = a["end"][i][mv] - start[mv]
        moving = (f < 1.0)[:, None]
        pos[mv] = start[mv] + span * ((1 - np.cos(np.pi * f)) / 2)[:, None]
        vel[mv] = np.where(moving, span * (np.pi / (2 * length) * np.sin(np.pi * f))[:, None], 0.0)
        acc[mv] = np.where(moving, span * ((np.pi / length) ** 2 / 2 * np.cos(np.pi * f))[:, None], 0.0)
    fallback = np.column_stack([direction, np.zeros(len(t))])
    vmag, vdir = _units(vel, fallback)
    amag, adir = _units(acc, fallback)
    amag = np.minimum(amag + np.abs(rng.normal(0.0, NOISE_A, len(t))), NON_KICK_A_MAX)
    kick_ps = a["kick_ps"]
    if len(kick_ps):
        k = np.searchsorted(kick_ps, ts, side="right") - 1
        since = ts - kick_ps[np.maximum(k, 0)]
        spike = (k >= 0) & (since < round(SPIKE_S * PS_PER_S))
        amag[spike] = a["kick_a"][k[spike]]
        adir[spike] = a["kick_dir"][k[spike]]
    return _rows(np.full(len(ts), sid), ts, pos, vmag, amag, vdir, adir)


def slice_rows(session: Session, ball_arrays: dict[int, dict[str, np.ndarray]], lo: int, hi: int,
               seed: int) -> np.ndarray:
    """All rows with ts in [lo, hi) of one half, sorted by (ts, sid)."""
    hi = min(hi, session.end_ps)
    lo = max(lo, session.base_ps)
    if hi <= lo:
        return np.empty((0, 13), dtype=np.int64)
    rng = np.random.default_rng([seed, 11, session.index, lo])
    parts = [player_rows(session, lo, hi)]
    parts += [ball_rows(session, ball_arrays[b], b, lo, hi, rng) for b in session.balls]
    rows = np.concatenate(parts)
    order = np.lexsort((rows[:, 0], rows[:, 1]))
    return rows[order]
