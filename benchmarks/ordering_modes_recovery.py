"""The outage bookkeeping of `pan bench ordering-modes`: outage windows, K before and after, late events near them.

Shared with the acceptance tests (``tests/bench/test_ordering_modes.py``, ``tests/bench/test_recovery_rule.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from benchmarks.ordering_modes_replay import Run

PS = 10**12
#: How far (event seconds) a quiet point for ``noise_ratio`` stays from every outage window.
QUIET_MARGIN_S = 3.0


def outage_windows(profile_path: Path) -> dict[str, list[tuple[float, float]]]:
    """Input stream -> its drop-outage windows (event seconds after the first row), from the profile."""
    from simulator.impair import ImpairProfile

    profile = ImpairProfile.load(profile_path)
    out: dict[str, list[tuple[float, float]]] = {}
    for sid, kind in profile.kind_of_sid.items():
        params = profile.params.get(kind)
        if params is not None and params.outage_windows_s and params.outage_mode == "drop":
            out[f"SENSOR{sid}"] = list(params.outage_windows_s)
    default = profile.params.get(profile.default_kind)
    if default is not None and default.outage_windows_s and default.outage_mode == "drop":
        out["*"] = list(default.outage_windows_s)
    return out


@dataclass(frozen=True)
class Recovery:
    """K of one unit just before an outage of some of its inputs and one K window after the reconnect."""

    worker: str
    window_s: tuple[float, float]
    k_before: int
    k_after: int
    pushed_after: int  # events the unit had been given when k_after was read (reconnect + one window)
    noise: float  # the largest K ratio over the same span at points of this run far from every outage

    @property
    def ratio(self) -> float:
        return _ratio(self.k_before, self.k_after)

    @property
    def ok(self) -> bool:
        """K back under twice its value before the outage (or not above it at all)."""
        return self.k_after < 2 * self.k_before or self.k_after <= self.k_before

    @property
    def within_noise(self) -> bool:
        """K rose no more than this run's scheduling alone made it rise, with no outage anywhere near.

        In max mode K follows the delays the machine's scheduling adds; on a loaded
        machine K doubles over some spans without any outage. Only a rise beyond
        all of those can be blamed on the reconnect.
        """
        return self.ratio <= self.noise


def _ratio(before: int, after: int) -> float:
    return after / before if before else (1.0 if not after else float("inf"))


def k_change(run: Run, worker: str, start_ts: int, end_ts: int) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The unit's samples just before ``start_ts`` and one K window after its clk passed ``end_ts``.

    Before = the last sample whose clk is before ``start_ts``; after = the first
    sample in which the unit has been given one K window (``window`` events)
    more than when its clk first passed ``end_ts``. None if the run did not get there.
    """
    timeline = [s for s in run.samples[worker] if s["clk"] is not None]
    before = [s for s in timeline if s["clk"] < start_ts]
    passed = next((s for s in timeline if s["clk"] >= end_ts), None)
    if not before or passed is None:
        return None
    after = next((s for s in timeline if s["pushed"] >= passed["pushed"] + run.windows[worker]), None)
    return None if after is None else (before[-1], after)


def noise_ratio(run: Run, worker: str, span_s: float, outages: list[tuple[float, float]]) -> float:
    """The largest K ratio (``k_change`` over ``span_s``) at whole event seconds far from every outage.

    Far = at least ``QUIET_MARGIN_S`` from each outage window, of any stream.
    """
    last_clk = max((s["clk"] for s in run.samples[worker] if s["clk"] is not None), default=run.origin_ts)
    last_s = (last_clk - run.origin_ts) / PS
    ratios = []
    for t in range(3, int(last_s - span_s)):  # from 3 s: K is warmed up
        if any(t + span_s > a - QUIET_MARGIN_S and t < b + QUIET_MARGIN_S for a, b in outages):
            continue
        change = k_change(run, worker, run.origin_ts + t * PS, run.origin_ts + int((t + span_s) * PS))
        if change is not None and change[0]["k"]:  # a rise from K = 0 has no ratio to compare with
            ratios.append(_ratio(change[0]["k"], change[1]["k"]))
    return max(ratios, default=1.0)


def late_near_and_far(run: Run, worker: str, affected: list[tuple[float, float]],
                      every_outage: list[tuple[float, float]]) -> tuple[float, float]:
    """Late fraction of one unit near its inputs' outages, and far from every outage.

    Near = sample intervals whose clk lies between the start of an outage of one of
    the unit's inputs and ``QUIET_MARGIN_S`` after its reconnect; far = intervals
    at least ``QUIET_MARGIN_S`` from every outage, after a 3 s warm-up. In max mode
    delays follow the machine's scheduling, so the far fraction is what load alone
    makes late; only the excess near outages can be blamed on them. NaN where a
    span got no events.
    """
    near, far = [0, 0], [0, 0]  # late, pushed
    timeline = [s for s in run.samples[worker] if s["clk"] is not None]
    for prev, cur in pairwise(timeline):
        t = (cur["clk"] - run.origin_ts) / PS
        late, pushed = cur["late"] - prev["late"], cur["pushed"] - prev["pushed"]
        if any(a <= t <= b + QUIET_MARGIN_S for a, b in affected):
            near[0] += late
            near[1] += pushed
        elif t >= 3 and all(t < a - QUIET_MARGIN_S or t > b + QUIET_MARGIN_S for a, b in every_outage):
            far[0] += late
            far[1] += pushed
    return tuple(n / d if d else float("nan") for n, d in (near, far))  # type: ignore[return-value]


def all_outages(windows_by_stream: dict[str, list[tuple[float, float]]]) -> list[tuple[float, float]]:
    """Every outage window of the profile, of any stream, once each."""
    return sorted({w for ws in windows_by_stream.values() for w in ws})


def affected_outages(run: Run, worker: str,
                     windows_by_stream: dict[str, list[tuple[float, float]]]) -> list[tuple[float, float]]:
    """The outage windows of the unit's input streams (the profile's default kind stands for other sensors)."""
    stream_names = run.inputs[worker]
    affected = sorted({w for s in stream_names for w in windows_by_stream.get(s, [])})
    if not affected and "*" in windows_by_stream and any(s.startswith("SENSOR") for s in stream_names):
        affected = windows_by_stream["*"]
    return affected


def recoveries(run: Run, windows_by_stream: dict[str, list[tuple[float, float]]]) -> list[Recovery]:
    """For each unit fed by a sensor with drop outages and each of those outages: K before and after.

    Outages the run did not reach are skipped. Each carries the run's noise:
    the same measurement at quiet points (``noise_ratio``).
    """
    every_outage = all_outages(windows_by_stream)
    out = []
    for worker in run.inputs:
        for start, end in affected_outages(run, worker, windows_by_stream):
            change = k_change(run, worker, run.origin_ts + int(start * PS), run.origin_ts + int(end * PS))
            if change is None:
                continue
            before, after = change
            out.append(Recovery(worker, (start, end), before["k"], after["k"], after["pushed"],
                                noise_ratio(run, worker, end - start, every_outage)))
    return out
