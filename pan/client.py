"""The subscriber client: pull a stream by index from whichever publisher serves it.

A public path kept for users (README, "Writing a component"); the code lives in ``pan.input.subscriber``.
"""

from pan.input.subscriber import StreamSubscriber

__all__ = ["StreamSubscriber"]
