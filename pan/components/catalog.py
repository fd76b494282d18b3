"""The component catalogue: every component type by the name workflow files use.

Types register with ``@register`` when their module is imported. The modules
come from the ``pan.components`` entry-point group, PAN's own generic types
(``forwarder``, ``repeater``, ``merge``) as much as a scenario package's, so
the catalogue names no module and no import cycle runs through it.
"""

from __future__ import annotations

import logging
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pan.components.base import Component

ENTRY_POINT_GROUP = "pan.components"

_REGISTRY: dict[str, type[Component]] = {}
_plugins_loaded = False


def register(cls: type[Component]) -> type[Component]:
    """Class decorator: make ``cls`` available to workflow files by its type name."""
    if not cls.type_name:
        raise ValueError(f"{cls.__name__} has no type_name")
    existing = _REGISTRY.get(cls.type_name)
    if existing is not None and existing is not cls:
        raise ValueError(f"component type {cls.type_name!r} registered twice")
    _REGISTRY[cls.type_name] = cls
    return cls


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            entry.load()
        except Exception:  # one broken plugin must not take the runtime down
            logging.getLogger(__name__).exception("cannot load component plugin %r", entry.value)
    if "forwarder" not in _REGISTRY:  # PAN's own entry points are missing: an install older than them
        logging.getLogger(__name__).error(
            "no %s entry points for PAN's own component types: reinstall PAN (pip install -e .)", ENTRY_POINT_GROUP)


def component_types() -> dict[str, type[Component]]:
    _load_plugins()
    return dict(_REGISTRY)


def get_component_type(type_name: str) -> type[Component] | None:
    return component_types().get(type_name)
