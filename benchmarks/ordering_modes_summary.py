"""The summary of `pan bench ordering-modes`: medians and spread over the repetitions of one mode."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchmarks import common
from benchmarks.ordering_modes_recovery import recoveries
from benchmarks.ordering_modes_replay import Run


def spread(values: Sequence[float]) -> dict[str, float]:
    vals = [v for v in values if v == v]
    return {"median": common.median(vals), "min": min(vals, default=float("nan")),
            "max": max(vals, default=float("nan"))}


def summarize(runs: list[Run], windows: dict[str, list[tuple[float, float]]]) -> dict[str, Any]:
    """Medians over the repetitions of one mode, with min and max."""
    units = list(runs[0].samples)
    per_run_rec = [recoveries(r, windows) for r in runs]
    return {
        "late_fraction": spread([r.late_fraction() for r in runs]),
        "worst_unit_late_fraction": spread([max(r.late_fraction(u) for u in units) for r in runs]),
        "recovery_worst_ratio": spread([max((x.ratio for x in rec), default=float("nan")) for rec in per_run_rec]),
        "recoveries_ok": sum(x.ok for rec in per_run_rec for x in rec),
        "recoveries": sum(len(rec) for rec in per_run_rec),
        "recoveries_beyond_noise": sum(not x.ok and not x.within_noise for rec in per_run_rec for x in rec),
        "noise_worst_ratio": spread([max((x.noise for x in rec), default=float("nan")) for rec in per_run_rec]),
        "k_ms": {u: {"median": spread([median_k_ms(r, u) for r in runs]),
                     "max": spread([max((s["k"] for s in r.samples[u]), default=0) / 1e9 for r in runs])}
                 for u in units},
        "late": {u: spread([r.late_fraction(u) for r in runs]) for u in units},
        "load_start": [r.load_start for r in runs],
        "load_end": [r.load_end for r in runs],
        "elapsed_s": spread([r.elapsed_s for r in runs]),
    }


def median_k_ms(run: Run, worker: str) -> float:
    return common.median(s["k"] / 1e9 for s in run.samples[worker] if s["clk"] is not None)


def median_run(runs: list[Run]) -> Run:
    """The repetition with the median late fraction (the one plotted)."""
    return sorted(runs, key=lambda r: r.late_fraction())[len(runs) // 2]
