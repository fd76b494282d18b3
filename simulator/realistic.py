"""Realistic DEBS 2013 match: the default of ``pan generate``.

Both halves are played (a short match gets a short first and second half),
players by ``simulator.rplay``, the ball by ``simulator.rball`` physics; rows
come from ``simulator.rsample`` (jittered clocks, dropouts, sensor noise) and
the ground truth from ``simulator.rtruth``. Like the real file, the first
half ends with a stretch without any ball data. Slices of 10 s are computed
by a small process pool and written in order, so the bytes do not depend on
the pool size.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator import rball, rtruth
from simulator.csvfmt import format_rows
from simulator.debs import BALLS_HALF1, BALLS_HALF2, HALF1, HALF2, PS_PER_S
from simulator.rplay import Engine
from simulator.rsample import RSession, slice_rows
from simulator.slices import fork_pool, slice_jobs, write_slices

log = logging.getLogger(__name__)
SLICE_PS = rtruth.SLICE_PS
HALF1_S = (HALF1[1] - HALF1[0]) / PS_PER_S
HALF2_S = (HALF2[1] - HALF2[0]) / PS_PER_S
#: Share of the first half at its end without ball data (the real file: ~159 s of 1804 s).
BALL_GAP_SHARE = 159 / 1804
BALL_GAP_MIN_HALF_S = 60.0


@dataclass
class RResult:
    rows: int
    seconds: float
    truth: rtruth.RTruth

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


def make_sessions(minutes: float | None, lead: float) -> list[RSession]:
    """Both halves: real lengths if ``minutes`` is None, else the minutes split evenly."""
    if minutes is None:
        l1, l2 = HALF1_S, HALF2_S
    else:
        if minutes <= 0:
            raise ValueError("minutes must be positive")
        l1 = round(minutes * 30.0, 3)
        l2 = round(minutes * 60.0 - l1, 3)
    s1 = RSession(0, HALF1[0], lead, l1, +1, BALLS_HALF1)
    s2 = RSession(1, HALF2[0], lead, l2, -1, BALLS_HALF2)
    if l1 >= BALL_GAP_MIN_HALF_S:
        s1.ball_gap = (s1.ko_ps + round((l1 - BALL_GAP_SHARE * l1) * PS_PER_S), s1.end_ps)
    return [s1, s2]


def _play(args: tuple[RSession, int]) -> RSession:
    s, seed = args
    rng = np.random.default_rng([seed, 17, s.index])
    s.played = Engine(rng, s.play_len, s.lead, s.attack_a, s.balls, s.index).run()
    s.arrays = {b: rball.seg_arrays(tr) for b, tr in s.played.tracks.items()}
    return s


_SESSIONS: list[RSession] = []
_SEED = 0


def _slice_job(job: tuple[int, int, int]) -> tuple[bytes, int]:
    index, lo, hi = job
    rows = slice_rows(_SESSIONS[index], lo, hi, _SEED)
    return format_rows(rows), len(rows)


def generate(out: Path | str, minutes: float | None, seed: int, workers: int | None = None,
             lead: float = 5.0, on_slice: Callable[[int, int], None] | None = None) -> RResult:
    """Write ``full-game``, ``interruptions.csv`` and ``truth/`` into ``out``; ``on_slice(done, total)`` after
    each time slice of rows written (`simulator.slices.write_slices`)."""
    global _SESSIONS, _SEED
    started = time.perf_counter()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    sessions = make_sessions(minutes, lead)
    if workers is None:
        workers = min(2, os.cpu_count() or 1)
    if workers > 1:
        with fork_pool(workers) as pool:
            sessions = pool.map(_play, [(s, seed) for s in sessions])
    else:
        sessions = [_play((s, seed)) for s in sessions]
    truth = rtruth.RTruth()
    for s in sessions:
        rtruth.add_half(truth, s, seed)
    rtruth.write(truth, out)
    log.info("played %d touches, %d shots in %.1f s", len(truth.touches), len(truth.shots),
             time.perf_counter() - started)
    jobs = slice_jobs(sessions, SLICE_PS)
    _SESSIONS, _SEED = sessions, seed
    try:
        rows = write_slices(out / "full-game", jobs, _slice_job, workers, on_slice)
    finally:
        _SESSIONS = []
    return RResult(rows, time.perf_counter() - started, truth)
