"""A component's base class and the context it is built with.

A public path kept for users (README, "Writing a component"); the code lives in ``pan.components.base``.
"""

from pan.components.base import (
    Component,
    ComponentContext,
)

__all__ = [
    "Component",
    "ComponentContext",
]
