"""DEBS 2013 Grand Challenge components for PAN."""

from workers import players  # noqa: F401
from workers import running  # noqa: F401
from workers import heatmap  # noqa: F401
from workers import ball  # noqa: F401
from workers import hits  # noqa: F401
from workers import possession  # noqa: F401
from workers import shots  # noqa: F401
