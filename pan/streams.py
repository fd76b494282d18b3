"""Output streams and the tuples they hold.

A public path kept for users (README, "Writing a component"); the code lives in ``pan.buffers.streams``
and ``pan.buffers.tuples``.
"""

from pan.buffers.streams import OutputStream
from pan.buffers.tuples import Tuple

__all__ = ["OutputStream", "Tuple"]
