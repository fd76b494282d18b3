"""The `/data` wire formats a benchmark compares in one run (issue 13): ``--wires``, and one run per format.

Every PAN process reads ``PAN_WIRE`` itself (`pan/wire/arrow_pages.py`), so a run uses one format
throughout when the variable is set before its processes start: children inherit it (the
`pan run` launcher, every peer, the replay's recorder, an observing client). ``json`` turns
Arrow off in servers too; ``auto`` (PAN's default) has only the readers that compute on columns
ask for Arrow pages (components with column inputs); ``arrow`` makes every subscriber ask for them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
from collections.abc import Iterator, Sequence

from benchmarks import common

WIRES = ("json", "auto", "arrow")
DEFAULT_WIRES = ("json", "auto")


def add_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--wires", type=parse, default=list(DEFAULT_WIRES), metavar="W[,W]",
                   help="PAN_WIRE values to compare in this run, reps interleaved: json (no Arrow), auto (Arrow for "
                   "readers that compute on columns), arrow (every reader) (default: json,auto)")


def parse(text: str) -> list[str]:
    """``json,arrow`` -> the formats, in that order; anything else is an argparse error, not a traceback."""
    return common.comma_choices(text, WIRES)


def check_available(wires: Sequence[str]) -> str | None:
    """Why these formats cannot be measured here (Arrow without pyarrow), or None."""
    from pan.wire.arrow_pages import available

    needing = [wire for wire in wires if wire != "json"]
    if needing and not available():
        return f"--wires {','.join(needing)} needs pyarrow (pip install 'pan[arrow]')"
    return None


def env(wire: str) -> dict[str, str]:
    """This process's environment with ``PAN_WIRE=wire``, for a child process."""
    from pan.wire.arrow_pages import WIRE_ENV

    return {**os.environ, WIRE_ENV: wire}


@contextlib.contextmanager
def chosen(wire: str) -> Iterator[None]:
    """``PAN_WIRE=wire`` in this process (and the children it starts) for the duration, then as before."""
    from pan.wire.arrow_pages import WIRE_ENV

    before = os.environ.get(WIRE_ENV)
    os.environ[WIRE_ENV] = wire
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(WIRE_ENV, None)
        else:
            os.environ[WIRE_ENV] = before


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, min and max of the repetitions' values."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def ratio(arrow: float | None, json: float | None) -> float | None:
    """arrow / json (or any wire's value over JSON's), or None without both."""
    if arrow is None or json is None or json == 0:
        return None
    return round(arrow / json, 3)


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]
