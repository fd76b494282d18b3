"""The realistic match engine (simulator/rplay.py): one ball on the pitch at a time.

Spare balls lie beyond the lines; the active-ball query relies on it (a ball
lying still inside the pitch would be taken for the ball in play). A throw-in
is taken from beyond the touchline, so the thrown ball starts outside: seed 11
once counted that as the ball going out again, restarted with another ball,
and left the thrown one lying on the pitch for the rest of the half.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator import rball
from simulator.debs import X_MAX, X_MIN, Y_MAX, Y_MIN
from simulator.realistic import _play, make_sessions

MINUTES = 10


@pytest.mark.parametrize("seed,half", [(11, 1), (19, 1), (7, 0)])
def test_never_two_balls_on_the_pitch(seed: int, half: int) -> None:
    session = _play((make_sessions(MINUTES, 5.0)[half], seed))
    assert session.played is not None
    throwins = sum(stop.kind == "throwin" for stop in session.played.stops)
    assert throwins >= 1, "the half has a throw-in to check"
    times = np.arange(0.0, session.play_len, 0.1)
    on_pitch = np.zeros(len(times), dtype=int)
    for arrays in session.arrays.values():
        pos = rball.eval_at(arrays, times)[0]
        on_pitch += (pos[:, 0] >= X_MIN) & (pos[:, 0] <= X_MAX) & (pos[:, 1] >= Y_MIN) & (pos[:, 1] <= Y_MAX)
    crowded = times[on_pitch >= 2]
    assert len(crowded) == 0, f"{throwins} throw-ins; two balls on the pitch at {crowded[:5]} s ({len(crowded)})"
