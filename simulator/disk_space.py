"""Whether a generated match, or its split, fits on the disk it is going to: asked before minutes of work.

A whole match is about 50 million rows, 4 GB of CSV, and its split as much
again; a disk that fills half way through ends in a truncated file and an
``OSError`` deep inside a worker process. The estimates here are upper bounds
from the sensors' rates, so a run that passes the check does not run out of
room for the CSV itself.
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Callable
from pathlib import Path

from simulator.debs import BALL_PERIOD_PS, BALLS_HALF2, ENTITIES, PLAYER_PERIOD_PS, PS_PER_S

#: A DEBS CSV row is 13 integers: 80 to 90 bytes with its newline.
ROW_BYTES = 92
#: Rows a second of data holds at most: every body sensor at 200 Hz, every ball at 2000 Hz.
ROWS_PER_S = (sum(len(e.sensors) for e in ENTITIES) * PS_PER_S // PLAYER_PERIOD_PS
              + len(BALLS_HALF2) * PS_PER_S // BALL_PERIOD_PS)
#: ``pan split`` writes the sorted rows once more, and Spark's shuffle spills up to as much again.
SPLIT_FACTOR = 2.0

FreeBytes = Callable[[Path], int]


def free_bytes(path: Path) -> int:
    """Free bytes of the filesystem that holds ``path`` (or would: its nearest existing parent)."""
    for folder in (path, *path.resolve().parents):
        if folder.exists():
            return shutil.disk_usage(folder).free
    return shutil.disk_usage(Path.cwd()).free


def generated_bytes(seconds_of_data: float) -> int:
    """An upper bound of the CSV a match of ``seconds_of_data`` (play plus leads) writes."""
    return int(seconds_of_data * ROWS_PER_S * ROW_BYTES)


def room_problem(folder: Path, needed: int, what: str, free: FreeBytes = free_bytes) -> str | None:
    """A one-line reason why ``what`` (``needed`` bytes) does not fit into ``folder``; None if it does."""
    available = free(folder)
    if available >= needed:
        return None
    return (f"{what} needs about {needed / 1e9:.1f} GB, but {folder} has {available / 1e9:.1f} GB free: "
            "free some space or choose another folder")


def is_disk_full(exc: OSError) -> bool:
    """Whether an OSError means the disk (or the user's quota) is full."""
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)
