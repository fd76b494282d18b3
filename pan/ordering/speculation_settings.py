"""The ``ordering`` object of a worker (``{"mode": "speculative", "alpha": 0.33}``): its keys, checks and settings.

Apart from the speculative unit (``pan/ordering/speculation.py``) because the workflow parser and the
components check and read the object without building a unit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

MODES = ("buffering", "speculative")
#: Keys of a worker's ``ordering`` object (``{"mode": "speculative", "alpha": 0.33}``).
ORDERING_OBJECT_KEYS = ("mode", "alpha", "max_snapshot_bytes", "input_view", "cpu")
#: How a speculative unit reads its inputs: ``raw`` (default) takes a speculative producer's unsettled tuples
#: and retractions, so gains add up across levels; ``settled`` only what no retraction can touch.
INPUT_VIEWS = ("raw", "settled")
#: What ``alpha: "auto"`` measures: ``component`` (default), the component's share of working time (the
#: seed's busy factor); ``loop`` and ``machine``, the larger of that and a busy CPU share (pan/util/cpu_share.py),
#: of the worker's event-loop thread (waiting for a core included) or of every core. docs/ordering.md says
#: why the default changed: on this project's 2-core machine the loop's waits for a core kept alpha at 1.
CPU_SIGNALS = ("component", "loop", "machine")
DEFAULT_MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024
AUTO = "auto"


@dataclass(frozen=True)
class SpeculationSettings:
    """``alpha`` in [0, 1] (1: emit no earlier than buffering would) or ``"auto"`` (adapted at run time)."""

    alpha: Fraction | str = Fraction(1)
    max_snapshot_bytes: int = DEFAULT_MAX_SNAPSHOT_BYTES
    cpu: str = CPU_SIGNALS[0]

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> SpeculationSettings:
        """From a worker's ``ordering`` object; ValueError names every problem."""
        problems = validate_ordering_object(obj)
        if problems:
            raise ValueError("; ".join(problems))
        alpha = obj.get("alpha", 1)
        return cls(
            alpha=AUTO if alpha == AUTO else Fraction(alpha).limit_denominator(10**6),
            max_snapshot_bytes=obj.get("max_snapshot_bytes", DEFAULT_MAX_SNAPSHOT_BYTES),
            cpu=obj.get("cpu", CPU_SIGNALS[0]),
        )


def validate_ordering_object(obj: Any) -> list[str]:
    """Problems with a worker's ``ordering`` object, each naming its key."""
    if not isinstance(obj, Mapping):
        return [f"ordering: must be an object, got {type(obj).__name__}"]
    problems = [f"ordering.{k}: unknown key (allowed: {', '.join(ORDERING_OBJECT_KEYS)})"
                for k in obj if k not in ORDERING_OBJECT_KEYS]
    mode = obj.get("mode", "buffering")
    if mode not in MODES:
        problems.append(f"ordering.mode: must be one of {', '.join(MODES)}, got {mode!r}")
    if "alpha" in obj:
        alpha = obj["alpha"]
        if mode != "speculative":
            problems.append("ordering.alpha: only with mode speculative")
        elif alpha != AUTO and not (
            isinstance(alpha, int | float) and not isinstance(alpha, bool) and math.isfinite(alpha) and 0 <= alpha <= 1
        ):
            problems.append(f'ordering.alpha: must be a number in [0, 1] or "auto", got {alpha!r}')
    if "input_view" in obj:
        if mode != "speculative":
            problems.append("ordering.input_view: only with mode speculative")
        elif obj["input_view"] not in INPUT_VIEWS:
            problems.append(f"ordering.input_view: must be one of {', '.join(INPUT_VIEWS)}, got {obj['input_view']!r}")
    if "cpu" in obj:
        if obj.get("alpha") != AUTO:
            problems.append('ordering.cpu: only with alpha "auto"')
        elif obj["cpu"] not in CPU_SIGNALS:
            problems.append(f"ordering.cpu: must be one of {', '.join(CPU_SIGNALS)}, got {obj['cpu']!r}")
    if "max_snapshot_bytes" in obj:
        cap = obj["max_snapshot_bytes"]
        if not (isinstance(cap, int) and not isinstance(cap, bool) and cap >= 0):
            problems.append(f"ordering.max_snapshot_bytes: must be an integer >= 0, got {cap!r}")
    return problems


__all__ = [
    "AUTO",
    "CPU_SIGNALS",
    "DEFAULT_MAX_SNAPSHOT_BYTES",
    "INPUT_VIEWS",
    "MODES",
    "ORDERING_OBJECT_KEYS",
    "SpeculationSettings",
    "validate_ordering_object",
]
