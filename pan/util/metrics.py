"""Prometheus exposition for `/metrics`, built with prometheus_client at scrape time.

Every number comes straight from the live counters when Prometheus asks:
a ``MetricsText`` collects one scrape's samples into metric families
(``# HELP``/``# TYPE``, counters as ``*_total``, histograms in seconds) and
renders them through a custom collector on a registry of its own, so no
process-wide registry is involved. Names never carry a stream: streams,
inputs, workers and peers are labels.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

_NOT_IN_NAME = re.compile(r"[^a-zA-Z0-9_:]")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def metric_name(text: str) -> str:
    """``text`` with every character a metric name may not hold replaced by ``_``."""
    return _NOT_IN_NAME.sub("_", text)


def _bound(upper: float, scale: float) -> float:
    """A bucket bound in the exposed unit, without float noise (1e-3 rather than 0.0010000000000000002)."""
    return math.inf if math.isinf(upper) else float(f"{upper * scale:.12g}")


class _Family:
    """One metric family of a scrape: its kind, help, label names and samples."""

    def __init__(self, name: str, kind: str, help_text: str, label_names: tuple[str, ...]) -> None:
        self.name, self.kind, self.help, self.label_names = name, kind, help_text, label_names
        self.samples: list[tuple[tuple[str, ...], Any]] = []

    def metric(self) -> Metric:
        if self.kind == "counter":
            family: Metric = CounterMetricFamily(self.name, self.help, labels=self.label_names)
        elif self.kind == "histogram":
            family = HistogramMetricFamily(self.name, self.help, labels=self.label_names)
        else:
            family = GaugeMetricFamily(self.name, self.help, labels=self.label_names)
        for values, value in self.samples:
            if self.kind == "histogram":
                buckets, total = value
                family.add_metric(list(values), buckets=buckets, sum_value=total)  # type: ignore[attr-defined]
            else:
                family.add_metric(list(values), value)  # type: ignore[attr-defined]
        return family


class MetricsText(Collector):
    """The samples of one scrape; ``common_labels`` (e.g. worker, peer) go on every one."""

    def __init__(self, **common_labels: str) -> None:
        self._common = common_labels
        self._families: dict[str, _Family] = {}

    def _family(self, name: str, kind: str, help_text: str | None, labels: Mapping[str, str]) -> _Family:
        merged = {**self._common, **labels}
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = _Family(name, kind, help_text or name.replace("_", " "), tuple(merged))
        elif tuple(merged) != family.label_names:
            raise ValueError(f"metric {name}: labels {tuple(merged)} differ from {family.label_names}")
        return family

    def add(self, name: str, value: float, kind: str = "gauge", help: str | None = None, **labels: str) -> None:
        """One sample; a counter's ``name`` may end in ``_total`` (it is exposed that way either way)."""
        if kind == "counter":
            name = name.removesuffix("_total")
        family = self._family(name, kind, help, labels)
        family.samples.append((tuple(str(v) for v in {**self._common, **labels}.values()), value))

    def add_flat(self, prefix: str, values: Mapping[str, Any], *, label_for: Mapping[str, str] | None = None,
                 **labels: str) -> None:
        """Numeric leaves of a nested dict (e.g. component counters) as gauges named by their path.

        A nested dict whose values are all numbers is a map (per stream, per reason): one gauge with the
        map's keys as a label, so that no metric name carries a stream. The label is ``stream`` when every
        key is one of ``label_for``'s streams (the worker's own), else ``key``.
        """
        for key, value in values.items():
            name = metric_name(f"{prefix}_{key}")
            if isinstance(value, bool):
                self.add(name, int(value), **labels)
            elif isinstance(value, int | float):
                self.add(name, value, **labels)
            elif isinstance(value, Mapping) and value and all(
                    isinstance(v, int | float) and not isinstance(v, bool) for v in value.values()):
                label = "stream" if label_for is not None and all(k in label_for for k in value) else "key"
                for inner, number in value.items():
                    self.add(name, number, **labels, **{label: str(inner)})
            elif isinstance(value, Mapping):
                self.add_flat(name, value, label_for=label_for, **labels)

    def add_histogram(
        self,
        name: str,
        buckets: list[tuple[float, int]],
        total: float,
        count: int,
        scale: float = 1.0,
        help: str | None = None,
        **labels: str,
    ) -> None:
        """Cumulative ``(upper bound, count)`` buckets; ``scale`` converts units (e.g. ps to s)."""
        exposed = [(str(_bound(upper, scale)) if not math.isinf(upper) else "+Inf", cumulative)
                   for upper, cumulative in buckets]
        if not exposed or exposed[-1][0] != "+Inf":
            exposed.append(("+Inf", count))
        family = self._family(name, "histogram", help, labels)
        family.samples.append((tuple(str(v) for v in {**self._common, **labels}.values()), (exposed, total * scale)))

    def collect(self) -> Iterator[Metric]:
        for family in self._families.values():
            yield family.metric()

    def render(self) -> str:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        return generate_latest(registry).decode()
