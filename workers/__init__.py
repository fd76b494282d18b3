"""DEBS 2013 Grand Challenge components for PAN."""

from workers import (
    ball,  # noqa: F401
    heatmap,  # noqa: F401
    hits,  # noqa: F401
    players,  # noqa: F401
    possession,  # noqa: F401
    running,  # noqa: F401
    shots,  # noqa: F401
)
