"""The realistic generator against statistics of public real DEBS 2013 rows.

A 2-minute realistic match (both halves, a ball-data gap at the end of the
first half) is generated once; each check measures a statistic on the rows a
user reads from ``full-game`` and compares it with the real file's (units:
mm, um/s, um/s^2, ps). Medians may be off by 30 %, tails by 40 %.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pan.cli import main
from simulator.debs import BALLS_HALF2, ENTITIES, HALF1, HALF2, X_MAX, X_MIN
from tests.simulator.test_generate import load_rows

LEGS = sorted(sid for e in ENTITIES[:16] for sid, kind in e.sensors if kind.startswith("leg"))
REAL = {"leg_a_median": 5.7, "leg_a_p99": 27.0, "leg_v_median": 0.8, "rest_a_median": 7.6, "rest_a_p99": 19.0,
        "d2_median_mm": 3.0, "d2_p99_mm": 18.0}


def near(value: float, real: float, share: float) -> bool:
    return abs(value - real) <= share * real


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    out = tmp_path_factory.mktemp("calib")
    assert main(["generate", "--minutes", "2", "--seed", "4", "--out", str(out)]) == 0
    return load_rows(Path(out) / "full-game")


def in_play(r: np.ndarray) -> np.ndarray:
    return r[(r[:, 1] >= HALF1[0]) & ((r[:, 1] < HALF1[1]) | (r[:, 1] >= HALF2[0]))]


@pytest.mark.slow
def test_player_leg_sensors(rows: np.ndarray) -> None:
    legs = in_play(rows[np.isin(rows[:, 0], LEGS)])
    a, v = legs[:, 6] / 1e6, legs[:, 5] / 1e6
    assert near(float(np.median(a)), REAL["leg_a_median"], 0.3)
    assert near(float(np.percentile(a, 99)), REAL["leg_a_p99"], 0.4)
    assert near(float(np.median(v)), REAL["leg_v_median"], 0.3)


@pytest.mark.slow
def test_ball_at_rest(rows: np.ndarray) -> None:
    balls = rows[np.isin(rows[:, 0], BALLS_HALF2)]
    rest = balls[balls[:, 5] < 300_000] / 1e6
    assert len(rest) > 100_000
    assert near(float(np.median(rest[:, 6])), REAL["rest_a_median"], 0.3)
    assert near(float(np.percentile(rest[:, 6], 99)), REAL["rest_a_p99"], 0.4)


@pytest.mark.slow
def test_position_noise_and_clock_jitter(rows: np.ndarray) -> None:
    d2, periods, gaps = [], [], []
    for sid in LEGS:
        r = rows[rows[:, 0] == sid]
        p = r[:, 2:5].astype(float)
        d2.append(np.linalg.norm(p[2:] - 2 * p[1:-1] + p[:-2], axis=1))
        dt = np.diff(r[:, 1]) / 1e9  # ms
        periods.append(dt[dt < 10])
        gaps.append(dt[(dt >= 10) & (dt < 1000)])
    d2_all, per, gap = np.concatenate(d2), np.concatenate(periods), np.concatenate(gaps)
    assert near(float(np.median(d2_all)), REAL["d2_median_mm"], 0.3)
    assert near(float(np.percentile(d2_all, 99)), REAL["d2_p99_mm"], 0.4)
    assert np.percentile(per, 1) >= 4.55 and np.percentile(per, 99) <= 5.05
    assert np.percentile(per, 99) - np.percentile(per, 1) > 0.3, "the clock jitters"
    assert len(gap) >= 5 and gap.min() >= 45 and 50 <= np.median(gap) <= 500, "short dropouts of 50-500 ms"
    assert gap.max() <= 1010, "two overlapping dropouts at most"


@pytest.mark.slow
def test_ball_gap_spares_and_both_halves(rows: np.ndarray) -> None:
    balls = rows[np.isin(rows[:, 0], BALLS_HALF2)]
    first = balls[balls[:, 1] < HALF2[0]]
    ts = np.unique(first[:, 1])
    assert np.diff(ts).max() > 5 * 10**12, "no ball data for the last stretch of the first half"
    players_first = rows[np.isin(rows[:, 0], LEGS) & (rows[:, 1] > ts[-1])]
    assert len(players_first), "players still send during the ball-data gap"
    assert (balls[:, 1] >= HALF2[0]).any() and 12 in set(balls[balls[:, 1] >= HALF2[0], 0].tolist())
    for kickoff in (HALF1[0], HALF2[0]):
        still = 0
        for sid in BALLS_HALF2:
            r = balls[(balls[:, 0] == sid) & (balls[:, 1] >= kickoff) & (balls[:, 1] < kickoff + 10 * 10**12)]
            x = r[:, 2] / 1000.0
            if len(r) and ((x < X_MIN) | (x > X_MAX)).all() and np.ptp(r[:, 2:4], axis=0).max() < 100:
                still += 1
        assert still >= 1, "a spare ball lies still beside a touchline"
