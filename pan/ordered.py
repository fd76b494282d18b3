"""Ordered components: a component whose inputs an ordering unit hands over in ts order.

A public path kept for users (README, "Writing a component"); the code lives in ``pan.components.ordered``.
"""

from pan.components.ordered import OrderedComponent

__all__ = ["OrderedComponent"]
