"""Small `pan split`-format folders of made-up sensor rows, for the simulator's tests and others that replay.

``small_match`` is one second of three sensors and an interruption; ``write_split`` and ``rate_rows``
make any other folder.
"""

from __future__ import annotations

from pathlib import Path

from simulator.debs import HALF1
from tests.conftest import sensor_row

PS = 10**12
T0 = HALF1[0]  # kick-off, ps
ALL = ["SENSOR4", "SENSOR13", "SENSOR47", "INTERRUPTIONS"]


def write_split(folder: Path, rows: dict[int, list[int]], interruptions: list[tuple[int, int]] = ()) -> Path:
    """A `pan split`-format folder: SENSOR<sid>.csv (no header, ts-sorted) and interruptions.csv."""
    folder.mkdir(parents=True, exist_ok=True)
    for sid, stamps in rows.items():
        text = "".join(sensor_row(sid, ts, k) + "\n" for k, ts in enumerate(stamps))
        (folder / f"SENSOR{sid}.csv").write_text(text)
    if interruptions:
        lines = ["start_ts,end_ts", *(f"{a},{b}" for a, b in interruptions)]
        (folder / "interruptions.csv").write_text("\n".join(lines) + "\n")
    return folder


def rate_rows(start: int, seconds: float, hz: int) -> list[int]:
    period = PS // hz
    return [start + n * period for n in range(int(seconds * hz))]


def small_match(folder: Path, seconds: float = 1.0) -> Path:
    return write_split(
        folder,
        {4: rate_rows(T0, seconds, 2000), 13: rate_rows(T0 + 1, seconds, 200), 47: rate_rows(T0 + 2, seconds, 200)},
        [(T0 + PS // 4, T0 + PS // 2)],
    )
