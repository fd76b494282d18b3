"""Settings of an ordering unit: its workflow params, their checks, and the initial K from a delay profile.

Apart from the unit (pan/ordering/unit.py) because a workflow is checked against them before any unit exists.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pan.ordering.picoseconds import PS_PER_S

LATE_POLICIES = ("deliver", "side")
CLOCK_MODES = ("max", "watermark")

#: Workflow ``params`` keys understood by ``OrderingSettings.from_params``.
PARAM_KEYS = (
    "clock", "lambda", "initial_k", "max_k", "late_policy", "window", "fallback", "notices",
    "clock_mode", "min_k",
)
#: Keys that existed once and are refused with an explanation (``validate_ordering_params``).
REMOVED_KEYS = {
    "idle_timeout": "removed: ordering units no longer decide on wall time; the forwarder declares a quiet "
    "input idle (its idle_after_ms param) and promises for it, and the end of a stream is an explicit "
    "end promise (docs/ordering.md); delete the key",
}


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (isinstance(v, int | float) and not isinstance(v, bool)) and math.isfinite(v)


@dataclass(frozen=True)
class OrderingSettings:
    """Per-component settings; times in ps.

    ``clock=None`` means every input stream is a clock stream (clk = largest ts
    seen on any input), ``fallback=None`` means every input may drive clk once
    every clock stream has ended. See docs/ordering.md for why these defaults.
    """

    clock: tuple[str, ...] | None = None
    lam: float = 0.5
    initial_k: int = 0
    max_k: int = 10 * PS_PER_S
    late_policy: str = "side"
    window: int = 10_000
    fallback: tuple[str, ...] | None = None
    notices: bool = True
    clock_mode: str = "max"
    min_k: int = 0

    def validate(self, streams: Sequence[str]) -> list[str]:
        """Problems with these settings for a unit over ``streams``; empty if fine."""
        problems: list[str] = []
        known = set(streams)
        for key, names in (("clock", self.clock), ("fallback", self.fallback)):
            if names is None:
                continue
            if not names:
                problems.append(f"{key}: must name at least one input stream")
            for n in names:
                if not isinstance(n, str) or n not in known:
                    problems.append(f"{key}: {n!r} is not an input stream")
        if not _is_number(self.lam) or self.lam < 0:
            problems.append(f"lambda: must be a finite number >= 0, got {self.lam!r}")
        for key in ("initial_k", "max_k"):
            v = getattr(self, key)
            if not is_int(v) or v < 0:
                problems.append(f"{key}: must be an integer >= 0 (ps), got {v!r}")
        if not is_int(self.min_k) or self.min_k < 0:
            problems.append(f"min_k: must be an integer >= 0 (ps), got {self.min_k!r}")
        elif is_int(self.max_k) and self.min_k > self.max_k:
            problems.append(f"min_k: {self.min_k} exceeds max_k {self.max_k}")
        if self.clock_mode not in CLOCK_MODES:
            problems.append(f"clock_mode: must be one of {', '.join(CLOCK_MODES)}, got {self.clock_mode!r}")
        elif self.clock_mode == "watermark" and self.clock is not None:
            problems.append("clock: not used with clock_mode watermark (every input counts)")
        if is_int(self.initial_k) and is_int(self.max_k) and self.initial_k > self.max_k:
            problems.append(f"initial_k: {self.initial_k} exceeds max_k {self.max_k}")
        if self.late_policy not in LATE_POLICIES:
            problems.append(f"late_policy: must be one of {', '.join(LATE_POLICIES)}, got {self.late_policy!r}")
        if not is_int(self.window) or self.window < 2:
            problems.append(f"window: must be an integer >= 2 (measurements), got {self.window!r}")
        if not isinstance(self.notices, bool):
            problems.append(f"notices: must be true or false, got {self.notices!r}")
        return problems

    @classmethod
    def from_params(cls, params: Mapping[str, Any] | None, streams: Sequence[str]) -> OrderingSettings:
        """Build from workflow ``params`` (keys in ``PARAM_KEYS``); ValueError lists every problem."""
        problems = validate_ordering_params(params, streams)
        if problems:
            raise ValueError("; ".join(problems))
        return cls._from_params_unchecked(params or {})

    @classmethod
    def _from_params_unchecked(cls, params: Mapping[str, Any]) -> OrderingSettings:
        kw: dict[str, Any] = {}
        for key in PARAM_KEYS:
            if key not in params:
                continue
            v = params[key]
            if key in ("clock", "fallback"):
                v = tuple(v) if isinstance(v, list | tuple) else v
            kw["lam" if key == "lambda" else key] = v
        return cls(**kw)

    def to_params(self) -> dict[str, Any]:
        """Inverse of ``from_params`` (for /streams and debugging)."""
        out: dict[str, Any] = {}
        for key in PARAM_KEYS:
            v = getattr(self, "lam" if key == "lambda" else key)
            out[key] = list(v) if isinstance(v, tuple) else v
        return out

    @classmethod
    def from_profile(
        cls,
        profile: Mapping[str, Any],
        streams: Sequence[str],
        base: OrderingSettings | None = None,
        stat: str = "max",
    ) -> OrderingSettings:
        """``base`` with ``initial_k`` taken from an offline delay profile (see ``k_from_profile``)."""
        base = base or cls()
        k = k_from_profile(profile, streams, clock=base.clock, stat=stat)
        if k is None:
            return base
        return replace(base, initial_k=min(k, base.max_k))


def validate_ordering_params(params: Mapping[str, Any] | None, streams: Sequence[str]) -> list[str]:
    """Check workflow ``params`` for an ordering unit; returns messages naming the key at fault."""
    if params is None:
        return []
    if not isinstance(params, Mapping):
        return [f"ordering params must be an object, got {type(params).__name__}"]
    problems = [f"{k}: {REMOVED_KEYS[k]}" for k in params if k in REMOVED_KEYS]
    problems += [f"unknown key {k!r}" for k in params if k not in PARAM_KEYS and k not in REMOVED_KEYS]
    for key in ("clock", "fallback"):
        v = params.get(key)
        if v is not None and not (isinstance(v, list | tuple) and all(isinstance(s, str) for s in v)):
            problems.append(f"{key}: must be a list of stream names, got {v!r}")
    if problems:
        return problems
    try:
        settings = OrderingSettings._from_params_unchecked(params)
    except TypeError as exc:  # pragma: no cover - keys are filtered above
        return [str(exc)]
    return settings.validate(streams)


_STAT_KEYS = {"max": "max_ps", "p99": "p99_ps", "p50": "p50_ps"}


def k_from_profile(
    profile: Mapping[str, Any],
    streams: Sequence[str],
    clock: Sequence[str] | None = None,
    stat: str = "max",
) -> int | None:
    """Initial K from per-stream delay statistics, or None if the profile knows none of ``streams``.

    Delays in the profile are absolute (arrival minus ts). The unit measures them
    relative to its clock streams, so K = largest ``stat`` over the inputs minus
    the smallest typical delay of a clock stream (``min_ps`` if given, else ``p50_ps``).
    """
    if stat not in _STAT_KEYS:
        raise ValueError(f"stat must be one of {', '.join(_STAT_KEYS)}, got {stat!r}")
    per = profile.get("streams") if isinstance(profile, Mapping) else None
    if not isinstance(per, Mapping):
        raise ValueError('delay profile must be an object with a "streams" object')
    key = _STAT_KEYS[stat]
    tails: list[float] = []
    refs: list[float] = []
    for name in streams:
        entry = per.get(name)
        if entry is None:
            continue
        if not isinstance(entry, Mapping) or not _is_number(entry.get(key)):
            raise ValueError(f"delay profile: stream {name!r} lacks a numeric {key!r}")
        tails.append(float(entry[key]))
        if clock is None or name in clock:
            ref = entry.get("min_ps", entry.get("p50_ps"))
            if _is_number(ref):
                refs.append(float(ref))
    if not tails:
        return None
    return max(0, math.ceil(max(tails) - (min(refs) if refs else 0.0)))


def load_profile(path: str | Path) -> dict[str, Any]:
    """Read a delay profile JSON file as written by ``pan stats delays``."""
    with open(path, "rb") as fh:
        profile = json.load(fh)
    if not isinstance(profile, dict) or not isinstance(profile.get("streams"), dict):
        raise ValueError(f'{path}: not a delay profile (expected {{"streams": {{...}}}})')
    return profile

