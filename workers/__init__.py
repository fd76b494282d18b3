"""DEBS 2013 Grand Challenge components for PAN."""

from workers import ball  # noqa: F401
from workers import hits  # noqa: F401
from workers import possession  # noqa: F401
from workers import shots  # noqa: F401
