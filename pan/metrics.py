"""Prometheus text exposition for `/metrics`.

The format is a handful of lines per sample; building it here keeps workers
free of a global metrics registry and lets every number come straight from
the live counters at scrape time.
"""

from __future__ import annotations

from typing import Any


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class MetricsText:
    def __init__(self, **common_labels: str) -> None:
        self._common = common_labels
        self._types: dict[str, str] = {}
        self._samples: dict[str, list[str]] = {}

    def add(self, name: str, value: float, kind: str = "gauge", **labels: str) -> None:
        self._types.setdefault(name, kind)
        merged = {**self._common, **labels}
        label_text = ",".join(f'{key}="{_escape(str(val))}"' for key, val in merged.items())
        self._samples.setdefault(name, []).append(f"{name}{{{label_text}}} {value}")

    def add_flat(self, prefix: str, values: dict[str, Any], **labels: str) -> None:
        """Numeric leaves of a nested dict, e.g. component counters, as gauges."""
        for key, value in values.items():
            name = f"{prefix}_{key}"
            if isinstance(value, bool):
                self.add(name, int(value), **labels)
            elif isinstance(value, int | float):
                self.add(name, value, **labels)
            elif isinstance(value, dict):
                self.add_flat(name, value, **labels)

    def render(self) -> str:
        lines: list[str] = []
        for name, samples in self._samples.items():
            lines.append(f"# TYPE {name} {self._types[name]}")
            lines.extend(samples)
        return "\n".join(lines) + "\n"
