"""Every DEBS 2013 component module: importing this registers their types (the ``pan.components`` entry point)."""

from workers import (
    ball,  # noqa: F401
    heatmap,  # noqa: F401
    hits,  # noqa: F401
    players,  # noqa: F401
    possession,  # noqa: F401
    running,  # noqa: F401
    shots,  # noqa: F401
)
