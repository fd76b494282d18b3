"""The README's "Writing a component" example runs as written (so the README cannot drift from the API)."""

from __future__ import annotations

import re

import pytest

from pan.components.testing import build_component, output_tuples
from pan.config.specs import WorkflowError
from tests.conftest import ROOT

PS = 10**12


def readme_examples() -> list[str]:
    """The Python blocks of the README's "Writing a component": the component, then its offline test."""
    section = (ROOT / "README.md").read_text().split("## Writing a component", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


@pytest.fixture(scope="module")
def example() -> None:
    component, _test = readme_examples()
    exec(compile(component, "README.md", "exec"), {"__name__": "readme_example"})  # registers the type


def test_readme_offline_test_of_the_component_passes(example: None) -> None:
    _component, test = readme_examples()
    assert "from pan.testing import" in test
    exec(compile(test, "README.md", "exec"), {"__name__": "readme_example_test"})  # its asserts must hold


def test_readme_component_reports_pauses_in_ts_order(example: None) -> None:
    component = build_component("pauses", {"min_gap_ps": PS, "clock_mode": "watermark"}, inputs=["A", "B"])
    component.feed("A", [{"ts": 0}, {"ts": 3 * PS}])  # A's 3 s pause is split by B's events
    component.feed("B", [{"ts": PS // 2}, {"ts": 2 * PS}])
    component.feed("A", [{"ts": 5 * PS}])
    component.finish()
    pauses = [(t["ts"], t["since"]) for t in output_tuples(component, "PAUSES")]
    assert pauses == [(2 * PS, PS // 2), (5 * PS, 3 * PS)]  # 0.5 -> 2 s and 3 -> 5 s; 0 -> 0.5 -> ... is short
    assert output_tuples(component, "PAUSES_late") == []


def test_readme_component_rejects_a_bad_parameter(example: None) -> None:
    with pytest.raises(WorkflowError, match="min_gap_ps"):
        build_component("pauses", {"min_gap_ps": "long"}, inputs=["A"])
