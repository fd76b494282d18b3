"""Sensor rows of the realistic generator: jittered clocks, dropouts, noise, kicks.

Calibrated to public DEBS 2013 rows: sample periods vary (4.6-5.0 ms at
200 Hz, a tenth of that for balls), every sensor drops out now and then for
50-500 ms, positions carry millimetre noise with a heavy tail, and the
velocity and acceleration vectors are the true ones plus sensor noise (a ball
lying still reads |a| of several m/s^2). A leg sensor swings to the ball at a
kick and jolts at every foot strike. A slice depends only on its own seed, so
slices can be made in parallel and concatenated.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simulator import rball
from simulator.debs import ENTITIES, PS_PER_S
from simulator.motion import KIND_INDEX
from simulator.rplay_records import Played
from simulator.sampling import _rows, _units

PLAYER_PERIOD_MS = (4.6, 5.0)
BALL_PERIOD_MS = (0.46, 0.50)
DROPOUT_EVERY_S = 40.0  # mean time between dropouts of one sensor
DROPOUT_MS = (50.0, 500.0)
POS_SIGMA = (0.00068, 0.0042, 0.06)  # m per axis: core noise, tail noise, share of the tail
PLAYER_V_SIGMA = 0.12  # m/s per axis
PLAYER_A_SIGMA = 3.1  # m/s^2 per axis
BALL_V_SIGMA = 0.08
BALL_A_SIGMA = (4.8, 8.0, 0.08)  # core, tail, tail share
STEP_SPIKE_S = 0.012
KICK_SWING_S = 0.06


@dataclass
class RSession:
    """One generated half of the realistic match."""

    index: int
    ko_ps: int
    lead: float
    play_len: float
    attack_a: int
    balls: tuple[int, ...]
    played: Played | None = None
    ball_gap: tuple[int, int] | None = None  # ps: no ball rows at all in [start, end)
    arrays: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)

    @property
    def base_ps(self) -> int:
        return self.ko_ps - round(self.lead * PS_PER_S)

    @property
    def end_ps(self) -> int:
        return self.ko_ps + round((self.play_len + self.lead) * PS_PER_S)


def jittered_times(rng: np.random.Generator, lo: int, hi: int, period_ms: tuple[float, float]) -> np.ndarray:
    """Sample instants in [lo, hi): each period drawn uniformly from ``period_ms``."""
    p_lo, p_hi = (round(p * 10**9) for p in period_ms)
    n = int((hi - lo) / p_lo) + 2
    steps = rng.integers(p_lo, p_hi + 1, n)
    ts = lo + int(rng.integers(0, p_lo)) + np.concatenate([[0], np.cumsum(steps[:-1])])
    return ts[ts < hi]


def dropouts(seed: int, index: int, sid: int, lo: int, hi: int) -> list[tuple[int, int]]:
    """The dropouts [start, end) ps of sensor ``sid`` that begin in the slice [lo, hi).

    Seeded apart from the samples, so the ground truth can tell which kicks
    the data cannot show without generating the rows.
    """
    rng = np.random.default_rng([seed, 31, index, sid, lo])
    out = []
    for _ in range(rng.poisson((hi - lo) / PS_PER_S / DROPOUT_EVERY_S)):
        start = int(rng.integers(lo, hi))
        out.append((start, start + round(rng.uniform(*DROPOUT_MS) * 10**9)))
    return out


def drop_mask(ts: np.ndarray, windows: list[tuple[int, int]]) -> np.ndarray:
    """True for samples outside every dropout window."""
    keep = np.ones(len(ts), dtype=bool)
    for a, b in windows:
        keep &= ~((ts >= a) & (ts < b))
    return keep


def _mixture(rng: np.random.Generator, shape: tuple[int, ...], core: float, tail: float, share: float) -> np.ndarray:
    sig = np.where(rng.uniform(size=shape[0]) < share, tail, core)
    return rng.normal(0.0, 1.0, shape) * sig[:, None]


def _pos_noise(rng: np.random.Generator, n: int) -> np.ndarray:
    return _mixture(rng, (n, 3), *POS_SIGMA)


def _leg_positions(s: RSession, ents: np.ndarray, kinds: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Sensor positions including the kicking leg's swing to the ball."""
    played = s.played
    assert played is not None
    pos, _ = played.knots.sensor(ents, kinds, t)
    lo, hi = float(t.min()) - 0.3, float(t.max()) + 0.3
    for k in played.touches:
        hands = k.part == "hands" and ENTITIES[k.ent].is_keeper
        if not (k.part == "foot" or hands) or not lo <= k.t <= hi:
            continue
        limb = 2 + k.leg if hands else k.leg  # a keeper's save: one hand goes to the ball
        m = (ents == k.ent) & (kinds == limb) & (np.abs(t - k.t) < 4 * KICK_SWING_S)
        if not m.any():
            continue
        base, _ = played.knots.sensor(np.array([k.ent]), np.array([limb]), np.array([k.t]))
        d = k.dv[:2] / max(float(np.hypot(*k.dv[:2])), 1e-9)
        goal = np.array([k.pos[0] - 0.18 * d[0], k.pos[1] - 0.18 * d[1], k.pos[2] + (0.0 if hands else 0.12)])
        w = np.exp(-0.5 * ((t[m] - k.t) / KICK_SWING_S) ** 2)
        pos[m] += w[:, None] * (goal - base[0])
    return pos


def player_rows(s: RSession, lo: int, hi: int, rng: np.random.Generator, seed: int) -> np.ndarray:
    played = s.played
    assert played is not None
    sids, ents, kinds, times = [], [], [], []
    for e, ent in enumerate(ENTITIES):
        for sid, kind in ent.sensors:
            ts = jittered_times(rng, lo, hi, PLAYER_PERIOD_MS)
            ts = ts[drop_mask(ts, dropouts(seed, s.index, sid, lo, hi))]
            times.append(ts)
            sids.append(np.full(len(ts), sid))
            ents.append(np.full(len(ts), e))
            kinds.append(np.full(len(ts), KIND_INDEX[kind]))
    ts = np.concatenate(times)
    ent, kind = np.concatenate(ents), np.concatenate(kinds)
    t = (ts - s.ko_ps).astype(np.float64) / PS_PER_S
    h = 0.002
    p = _leg_positions(s, ent, kind, t)
    pm = _leg_positions(s, ent, kind, t - h)
    pp = _leg_positions(s, ent, kind, t + h)
    vel = (pp - pm) / (2 * h)
    acc = (pp - 2 * p + pm) / (h * h)
    n = len(t)
    # foot strikes: a short jolt, mostly vertical, growing with speed
    knots = played.knots
    k, f = knots._locate(t)
    assert knots.phase is not None
    ph = knots.phase[ent, k] * (1 - f) + knots.phase[ent, k + 1] * f
    speed = np.hypot(knots.vel[ent, k, 0], knots.vel[ent, k, 1])
    cadence = 2 * np.pi * (1.0 + 0.22 * speed)
    since = ((ph + np.pi * (kind % 2)) % (2 * np.pi)) / cadence
    legs = kind < 2
    jolt = np.where(legs & (speed > 0.7), (6.0 + 5.5 * speed) * np.exp(-since / STEP_SPIKE_S), 0.0)
    jolt *= rng.uniform(0.5, 1.5, n)
    acc[:, 2] += jolt
    acc[:, :2] += (vel[:, :2] / np.maximum(np.hypot(vel[:, 0], vel[:, 1]), 1e-9)[:, None]) * (0.4 * jolt)[:, None]
    vel += rng.normal(0.0, PLAYER_V_SIGMA, (n, 3))
    acc += rng.normal(0.0, PLAYER_A_SIGMA, (n, 3))
    p = p + _pos_noise(rng, n)
    fwd = np.column_stack([np.ones(n), np.zeros(n), np.zeros(n)])
    vmag, vdir = _units(vel, fwd)
    amag, adir = _units(acc, fwd)
    return _rows(np.concatenate(sids), ts, p, vmag, amag, vdir, adir)


def ball_rows(s: RSession, sid: int, lo: int, hi: int, rng: np.random.Generator, seed: int) -> np.ndarray:
    played = s.played
    assert played is not None
    ts = jittered_times(rng, lo, hi, BALL_PERIOD_MS)
    ts = ts[drop_mask(ts, dropouts(seed, s.index, sid, lo, hi))]
    if s.ball_gap is not None:
        ts = ts[(ts < s.ball_gap[0]) | (ts >= s.ball_gap[1])]
    if len(ts) == 0:
        return np.empty((0, 13), dtype=np.int64)
    t = (ts - s.ko_ps).astype(np.float64) / PS_PER_S
    arr = s.arrays[sid]
    pos, vel, acc, i = rball.eval_at(arr, t)
    held = arr["kind"][i] == rball.HELD
    if held.any():
        knots = played.knots
        e = arr["ent"][i][held]
        th = t[held]

        off = arr["end"][i][held]  # HELD: offset from the holder's body (x, y) and height

        def at(tt: np.ndarray) -> np.ndarray:
            return np.column_stack([knots.body(e, tt) + off[:, :2], off[:, 2]])

        h = 0.01
        pc, pm, pp = at(th), at(th - h), at(th + h)
        pos[held], vel[held], acc[held] = pc, (pp - pm) / (2 * h), (pp - 2 * pc + pm) / (h * h)
    for k in played.touches:
        if k.ball != sid:
            continue
        m = (t >= k.t) & (t < k.t + k.contact_s)
        if not m.any():
            continue
        frac = (t[m] - k.t) / k.contact_s
        vel[m] = vel[m] - k.dv * (1 - frac)[:, None]
        acc[m] = acc[m] + k.dv / k.contact_s
    n = len(t)
    vel += rng.normal(0.0, BALL_V_SIGMA, (n, 3))
    acc += _mixture(rng, (n, 3), *BALL_A_SIGMA)
    pos = pos + _pos_noise(rng, n)
    fwd = np.column_stack([np.ones(n), np.zeros(n), np.zeros(n)])
    vmag, vdir = _units(vel, fwd)
    amag, adir = _units(acc, fwd)
    return _rows(np.full(n, sid), ts, pos, vmag, amag, vdir, adir)


def slice_rows(s: RSession, lo: int, hi: int, seed: int) -> np.ndarray:
    """All rows of one half with ts in [lo, hi), sorted by (ts, sid)."""
    hi, lo = min(hi, s.end_ps), max(lo, s.base_ps)
    if hi <= lo:
        return np.empty((0, 13), dtype=np.int64)
    rng = np.random.default_rng([seed, 29, s.index, lo])
    parts = [player_rows(s, lo, hi, rng, seed)] + [ball_rows(s, b, lo, hi, rng, seed) for b in s.balls]
    rows = np.concatenate(parts)
    return rows[np.lexsort((rows[:, 0], rows[:, 1]))]
