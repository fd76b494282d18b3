"""Synthetic DEBS 2013 match: the public entry point of the generator.

``generate`` plans each half (pass 1), fixes the ball exactly (pass 2),
derives the ground truth, then writes ``full-game`` in 10 s slices. Slices
are computed by a small process pool and written in order, so memory stays
bounded for a full-length match and the bytes do not depend on the pool size.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.ball import build_tracks
from simulator.csvfmt import format_rows
from simulator.debs import (
    BALL_PERIOD_PS,
    BALLS_HALF1,
    BALLS_HALF2,
    ENTITIES,
    HALF1,
    HALF2,
    PLAYER_PERIOD_PS,
    PS_PER_S,
)
from simulator.plan import plan_session
from simulator.plan_script import Session
from simulator.sampling import slice_rows
from simulator.slices import fork_pool, slice_jobs, write_slices
from simulator.truth import Truth, add_session, write_truth

log = logging.getLogger(__name__)
SLICE_PS = 10 * PS_PER_S
DEFAULT_LEAD_S = 5.0
HALF1_S = (HALF1[1] - HALF1[0]) / PS_PER_S
HALF2_S = (HALF2[1] - HALF2[0]) / PS_PER_S


@dataclass
class Result:
    rows: int
    seconds: float
    truth: Truth

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def make_sessions(minutes: float | None, seed: int, lead: float = DEFAULT_LEAD_S) -> list[Session]:
    """Halves to generate: ``minutes`` of play from the first kick-off, or both halves if None."""
    play = HALF1_S + HALF2_S if minutes is None else minutes * 60.0
    if play <= 0:
        raise ValueError("minutes must be positive")
    rng = np.random.default_rng([seed, 3])
    player_phase = {sid: int(rng.integers(0, PLAYER_PERIOD_PS)) for e in ENTITIES for sid, _ in e.sensors}
    ball_phase = {sid: int(rng.integers(0, BALL_PERIOD_PS)) for sid in BALLS_HALF2}
    sessions = [Session(0, HALF1[0], lead, min(play, HALF1_S), +1, BALLS_HALF1, ball_phase, player_phase)]
    if play > HALF1_S:
        sessions.append(
            Session(1, HALF2[0], lead, min(play - HALF1_S, HALF2_S), -1, BALLS_HALF2, ball_phase, player_phase)
        )
    return sessions


# State shared with forked workers (set before the pool starts).
_SESSIONS: list[Session] = []
_BALLS: list[dict[int, dict[str, np.ndarray]]] = []
_SEED = 0


def _plan_job(args: tuple[Session, int]) -> Session:
    return plan_session(*args)


def _slice_job(job: tuple[int, int, int]) -> tuple[bytes, int]:
    index, lo, hi = job
    rows = slice_rows(_SESSIONS[index], _BALLS[index], lo, hi, _SEED)
    return format_rows(rows), len(rows)


def generate(out: Path | str, minutes: float | None, seed: int, workers: int | None = None,
             lead: float = DEFAULT_LEAD_S) -> Result:
    """Write ``full-game``, ``interruptions.csv`` and ``truth/`` into ``out``."""
    global _SESSIONS, _BALLS, _SEED
    started = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    sessions = make_sessions(minutes, seed, lead)
    if workers is None:
        workers = min(2, os.cpu_count() or 1)
    if workers > 1 and len(sessions) > 1:
        with fork_pool(workers) as pool:
            sessions = pool.map(_plan_job, [(s, seed) for s in sessions])
    else:
        sessions = [plan_session(s, seed) for s in sessions]
    truth = Truth()
    balls = []
    for i, s in enumerate(sessions):
        tracks, results = build_tracks(s)
        balls.append({b: t.arrays() for b, t in tracks.items()})
        add_session(truth, s, results, sessions[i + 1].ko_ps if i + 1 < len(sessions) else None)
    log.info("planned %d kicks, %d shots, %d interruptions in %.1f s", len(truth.kicks), len(truth.shots),
             len(truth.interruptions), time.perf_counter() - started)
    if truth.near_misses:
        log.info("%d kicks pass close to the shot definition's edge", truth.near_misses)
    write_truth(truth, out, out)
    jobs = slice_jobs(sessions, SLICE_PS)
    _SESSIONS, _BALLS, _SEED = sessions, balls, seed
    try:
        rows = write_slices(out / "full-game", jobs, _slice_job, workers)
    finally:
        _SESSIONS, _BALLS = [], []
    return Result(rows, time.perf_counter() - started, truth)
