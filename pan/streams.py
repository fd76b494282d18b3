"""Output streams and the tuples they hold.

A public path kept for users (README, "Writing a component"); the code lives in ``pan.buffers.streams``.
"""

from pan.buffers.streams import (
    OutputStream,
    Tuple,
)

__all__ = ["OutputStream", "Tuple"]
