"""The catalogue of component types, by the names workflow files use.

A public path kept for users (README, "Writing a component"); the code lives in ``pan.components.catalog``.
"""

from pan.components.catalog import (
    component_types,
    get_component_type,
    register,
)

__all__ = ["component_types", "get_component_type", "register"]
