"""Reading `/metrics` answers the way Prometheus does: with prometheus_client's own parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

__all__ = ["families", "samples", "text_string_to_metric_families", "value"]


def samples(text: str) -> list[Sample]:
    """Every sample of an exposition (the parser raises on text Prometheus would not accept)."""
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def value(text: str, name: str, **labels: str) -> float:
    """The one sample named ``name`` whose labels include ``labels``."""
    found = [s.value for s in samples(text) if s.name == name and labels.items() <= s.labels.items()]
    if len(found) != 1:
        raise AssertionError(f"{len(found)} samples of {name} with {labels}")
    return found[0]


def families(text: str) -> dict[str, str]:
    """Family name -> type."""
    return {family.name: family.type for family in text_string_to_metric_families(text)}
