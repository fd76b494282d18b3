"""Testing a component offline, without servers: feed it tuples and read what it emits.

A public path kept for users (README, "Writing a component"); the code lives in ``pan.components.testing``.
"""

from pan.components.testing import (
    OutputReader,
    build_component,
    in_input_order,
    output_tuples,
)

__all__ = [
    "OutputReader",
    "build_component",
    "in_input_order",
    "output_tuples",
]
