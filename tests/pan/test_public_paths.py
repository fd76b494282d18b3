"""The import paths promised to users still work after the move into subpackages, and name the same objects."""

from __future__ import annotations

import importlib
import types

import pytest

#: The README's "Writing a component" and client examples import these (issue 40, item 5).
PROMISED = {
    "pan.ordered": ("OrderedComponent",),
    "pan.catalog": ("register", "component_types", "get_component_type"),
    "pan.component": ("Component", "ComponentContext"),
    "pan.specs": ("WorkerSpec", "Workflow", "WorkflowError", "RepositorySpec"),
    "pan.streams": ("Tuple", "OutputStream"),
    "pan.testing": ("build_component", "output_tuples", "OutputReader", "in_input_order"),
    "pan.client": ("StreamSubscriber",),
}


@pytest.mark.parametrize("path", sorted(PROMISED))
def test_a_promised_path_re_exports_the_objects_of_a_subpackage(path: str) -> None:
    module = importlib.import_module(path)
    assert set(module.__all__) >= set(PROMISED[path])
    for name in PROMISED[path]:
        thing = getattr(module, name)
        if isinstance(thing, types.GenericAlias):
            continue  # a type alias (``Tuple``) has no home of its own to compare with
        home = thing.__module__
        assert home.startswith("pan.") and home.count(".") >= 2, (name, home)  # defined inside a subpackage
        assert getattr(importlib.import_module(home), name) is thing
