"""The INTERRUPTIONS stream of the batch references for Q2 and Q4 (workers/reference_q2.py, reference_q4.py).

INTERRUPTIONS is what `pan simulate` feeds: ``begin``/``end`` from
``interruptions.csv`` (an ``end`` before a ``begin`` at equal ts) plus a
``heartbeat`` every ``heartbeat_ms`` of event time over the data's span (its
first to last row, from ``manifest.json`` when there is one); no stream at all
without ``interruptions.csv``. Heartbeats are events too, so they open buckets.

Apart from the Q2 job because Q4 reads the same events, and they need no Spark but for the data's span.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from workers.debs import PS_PER_MS

HEARTBEAT_MS = 10  # as `pan simulate` feeds (simulator.simulate.HEARTBEAT_PS); a test checks they agree
SENSOR_FILE = re.compile(r"SENSOR(\d+)\.csv")


# --- INTERRUPTIONS --------------------------------------------------------------------------------

def interruption_events(data_dir: Path, span: tuple[int, int] | None, heartbeat_ms: int) -> list[tuple[int, int, str]]:
    """(ts, rank, event) in stream order: ``end`` (0) before ``begin`` (1) before ``heartbeat`` (2) at equal ts."""
    path = data_dir / "interruptions.csv"
    if not path.is_file():
        return []
    events: list[tuple[int, int, str]] = []
    if span is not None and heartbeat_ms > 0:
        period = heartbeat_ms * PS_PER_MS
        first, last = span
        events += [(ts, 2, "heartbeat") for ts in range(first - first % period + period, last + 1, period)]
    for number, raw in enumerate(path.read_text().splitlines()):
        parts = raw.strip().split(",")
        if not raw.strip() or (number == 0 and not parts[0].lstrip("-").isdigit()):
            continue  # header or blank line
        try:
            start, end = int(parts[0]), int(parts[1])
        except (ValueError, IndexError):
            raise ValueError(f"{path}: line {number + 1}: expected start_ts,end_ts, got {raw!r}") from None
        events += [(start, 1, "begin"), (end, 0, "end")]
    events.sort(key=lambda e: (e[0], e[1]))
    return events


def data_span(spark: Any, data_dir: Path) -> tuple[int, int] | None:
    """First and last ts of the folder's sensor rows: the manifest's, else read from every SENSOR<sid>.csv."""
    manifest = data_dir / "manifest.json"
    if manifest.is_file():
        try:
            sensors = json.loads(manifest.read_text()).get("sensors", {})
            firsts = [s["first_ts"] for s in sensors.values() if isinstance(s.get("first_ts"), int)]
            lasts = [s["last_ts"] for s in sensors.values() if isinstance(s.get("last_ts"), int)]
            if firsts and lasts:
                return min(firsts), max(lasts)
        except (ValueError, AttributeError, TypeError, KeyError):
            pass
    files = sorted(str(p) for p in data_dir.iterdir() if SENSOR_FILE.fullmatch(p.name))
    if not files:
        return None
    from pyspark.sql import functions as F

    ts = spark.read.csv(files, schema="sid long, ts long")
    row = ts.agg(F.min("ts").alias("lo"), F.max("ts").alias("hi")).first()
    return None if row is None or row["lo"] is None else (row["lo"], row["hi"])
