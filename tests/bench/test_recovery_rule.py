"""The K-recovery rule of the ordering-mode acceptance (``benchmarks.ordering_modes_recovery.recoveries``).

Synthetic timelines: a unit that takes 1,000 events per event second and
whose K is sampled every 0.1 s, with one drop outage of its input at 20-21 s.
"""

from __future__ import annotations

from benchmarks import ordering_modes_recovery, ordering_modes_replay

PS = ordering_modes_recovery.PS
ORIGIN = 10**16
OUTAGE = (20.0, 21.0)


def run_with(k_at: dict[float, int], base_k: int = 30 * 10**9, seconds: int = 60) -> ordering_modes_replay.Run:
    """One unit's samples; K is ``base_k`` except at the event seconds given (``k_at``, from then for 1 s)."""
    samples = []
    for tenth in range(seconds * 10):
        t = tenth / 10
        k = next((v for start, v in k_at.items() if start <= t < start + 1), base_k)
        samples.append({"t": t, "clk": ORIGIN + int(t * PS), "k": k, "pushed": tenth * 100, "late": 0,
                        "released": tenth * 100, "buffered": 0, "ended": 0})
    return ordering_modes_replay.Run("max", ORIGIN, {"U": samples}, {"U": 500}, {"U": ["SENSOR4"]}, 60.0, {}, {})


def only(run: ordering_modes_replay.Run) -> ordering_modes_recovery.Recovery:
    (recovery,) = ordering_modes_recovery.recoveries(run, {"SENSOR4": [OUTAGE]})
    return recovery


def test_k_back_to_its_level_after_the_reconnect_is_ok() -> None:
    r = only(run_with({}))
    assert r.ok and r.ratio == 1.0 and r.noise == 1.0


def test_k_stuck_high_after_the_reconnect_fails_on_a_calm_run() -> None:
    r = only(run_with({21.5: 10 * 30 * 10**9}))  # one window (0.5 s) after the reconnect K is 10x
    assert not r.ok and not r.within_noise and r.ratio == 10.0 and r.noise == 1.0


def test_a_rise_the_run_also_shows_far_from_any_outage_is_noise() -> None:
    r = only(run_with({21.5: 3 * 30 * 10**9, 40.5: 4 * 30 * 10**9}))  # K x4 at 40 s with no outage near
    assert not r.ok and r.within_noise and r.noise == 4.0


def test_a_rise_beyond_the_noise_still_fails() -> None:
    r = only(run_with({21.5: 10 * 30 * 10**9, 40.5: 3 * 30 * 10**9}))
    assert not r.ok and not r.within_noise and r.noise == 3.0


def test_rises_near_another_outage_are_not_counted_as_noise() -> None:
    run = run_with({21.5: 10 * 30 * 10**9, 31.5: 20 * 30 * 10**9})
    (first, second) = ordering_modes_recovery.recoveries(run, {"SENSOR4": [OUTAGE, (30.0, 31.0)]})
    assert not first.within_noise and not second.within_noise and first.noise == 1.0


def test_a_rise_from_k_zero_is_not_taken_as_noise() -> None:
    run = run_with({21.5: 10 * 30 * 10**9, 40.0: 0, 41.0: 30 * 10**9})
    assert not only(run).within_noise
