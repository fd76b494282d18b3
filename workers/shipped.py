"""The files that come with the scenario package: its workflows and the demo's sample rows.

They are package data (``pyproject.toml``), read through ``importlib.resources``, so the demos find them in a
checkout and in a plain (non-editable) install alike, whatever the current directory.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def _package_file(*parts: str) -> Path:
    """A file of this package on disk (pip installs wheels unpacked, so it always is one)."""
    return Path(str(resources.files("workers").joinpath(*parts)))


def workflow(name: str) -> Path:
    """A shipped workflow, e.g. ``full_game_3_peers.json`` (``workflows/`` in the repository)."""
    return _package_file("workflows", name)


def demo_rows() -> Path:
    """The DEBS CSV sample that `pan demo-forwarding` replays."""
    return _package_file("data", "demo_rows.csv")
