"""Prometheus text exposition for `/metrics`.

The format is a handful of lines per sample; building it here keeps workers
free of a global metrics registry and lets every number come straight from
the live counters at scrape time.
"""

from __future__ import annotations

import math
import re
from typing import Any

_NOT_IN_NAME = re.compile(r"[^a-zA-Z0-9_:]")


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class MetricsText:
    def __init__(self, **common_labels: str) -> None:
        self._common = common_labels
        self._families: dict[str, tuple[str, list[str]]] = {}  # family -> (type, sample lines)

    def _sample(self, family: str, kind: str, name: str, value: float, labels: dict[str, str]) -> None:
        merged = {**self._common, **labels}
        label_text = ",".join(f'{key}="{_escape(str(val))}"' for key, val in merged.items())
        self._families.setdefault(family, (kind, []))[1].append(f"{name}{{{label_text}}} {value}")

    def add(self, name: str, value: float, kind: str = "gauge", **labels: str) -> None:
        self._sample(name, kind, name, value, labels)

    def add_flat(self, prefix: str, values: dict[str, Any], **labels: str) -> None:
        """Numeric leaves of a nested dict, e.g. component counters, as gauges."""
        for key, value in values.items():
            name = _NOT_IN_NAME.sub("_", f"{prefix}_{key}")  # keys may be stream names: "A-2" is no metric name
            if isinstance(value, bool):
                self.add(name, int(value), **labels)
            elif isinstance(value, int | float):
                self.add(name, value, **labels)
            elif isinstance(value, dict):
                self.add_flat(name, value, **labels)

    def add_histogram(
        self,
        name: str,
        buckets: list[tuple[float, int]],
        total: float,
        count: int,
        scale: float = 1.0,
        **labels: str,
    ) -> None:
        """Cumulative ``(upper bound, count)`` buckets; ``scale`` converts units (e.g. ps to s)."""
        for upper, cumulative in buckets:
            le = "+Inf" if math.isinf(upper) else repr(upper * scale)
            self._sample(name, "histogram", f"{name}_bucket", cumulative, {**labels, "le": le})
        self._sample(name, "histogram", f"{name}_sum", total * scale, labels)
        self._sample(name, "histogram", f"{name}_count", count, labels)

    def render(self) -> str:
        lines: list[str] = []
        for family, (kind, samples) in self._families.items():
            lines.append(f"# TYPE {family} {kind}")
            lines.extend(samples)
        return "\n".join(lines) + "\n"
