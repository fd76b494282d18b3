"""Spark batch reference for the player averages and Q1 to Q4 (issue 5, item 4; Q4 issue 11).

Reads a ``pan split`` folder and writes ``OUTDIR/<stream>.jsonl`` exactly as the
streaming recorder does (one ``orjson`` object per line, ``i`` first, then the
tuple's fields in the component's order), so a test can compare the streaming
outputs with these tuple by tuple. It is an independent implementation of
docs/q1-q3.md and of the Q2 and Q4 rules (workers/reference_q2.py, reference_q4.py): only
``workers/debs.py`` facts are shared with the components.

Each stream is written whole by one task (its ``i`` counted there, in ts
order); the files go straight from the executors to OUTDIR, which on a cluster
must be a shared folder. A task that is retried rewrites its streams from
scratch (temporary file, then rename). The Q2 streams other than ACTIVEBALL
are small and come out of a sequential step in the driver, which writes them.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from workers.debs import PLAYERS, REFEREE, SENSOR_OWNER, WINDOWS
from workers.reference_players import player_average, read_rows
from workers.reference_q1 import BANDS, counted_parts, run_aggregates, run_current
from workers.reference_q2 import q2, q2_streams
from workers.reference_q2_active import AB_FIELDS, KEY
from workers.reference_q2_hits import HIT_FIELDS
from workers.reference_q2_interruptions import HEARTBEAT_MS, interruption_events
from workers.reference_q2_possession import BP_FIELDS, TEAM_FIELDS
from workers.reference_q3 import GRIDS, HM_WINDOWS, boundaries_reached, cell_seconds, heatmap_rows
from workers.reference_q4 import SHOT_FIELDS, segments, shots

ENTITIES = [*PLAYERS, REFEREE]
PA_FIELDS = ("ts", "player", "x", "y", "z", "v", "a")
RUN_FIELDS = ("ts", "ts_start", "ts_stop", "player", "intensity", "distance", "speed")
RUNAGG_FIELDS = ("ts", "player", *(f"{b}_{k}" for b in BANDS for k in ("time_ps", "distance")))


def expected_streams(windows: list[str], hm_windows: list[str], grids: list[str]) -> list[str]:
    """Every stream the full-game workflow records for these queries (the files to create, maybe empty)."""
    run = [s for p in PLAYERS for s in (f"RUN_{p}", *(f"RUNAGG_{w}_{p}" for w in windows))]
    hm = [f"HM_{w}_{g}_{p}" for p in PLAYERS for w in hm_windows for g in grids]
    return [*ENTITIES, *run, *hm, *q2_streams(), "SHOTS"]


class _StreamFiles:
    """Writes consecutive tuples of one stream at a time, numbering them from 0."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self.counts: dict[str, int] = {}
        self._stream: str | None = None
        self._file: Any = None
        self._lines: list[bytes] = []

    def write(self, stream: str, record: dict[str, Any]) -> None:
        if stream != self._stream:
            self.close()
            self._stream = stream
            self._file = open(os.path.join(self.out_dir, f".{stream}.jsonl.part"), "wb")  # noqa: SIM115
            self.counts[stream] = 0
        self._lines.append(orjson.dumps({"i": self.counts[stream], **record}) + b"\n")
        self.counts[stream] += 1
        if len(self._lines) >= 2000:
            self._file.write(b"".join(self._lines))
            self._lines.clear()

    def close(self) -> None:
        if self._stream is None:
            return
        self._file.write(b"".join(self._lines))
        self._lines.clear()
        self._file.close()
        os.replace(os.path.join(self.out_dir, f".{self._stream}.jsonl.part"),
                   os.path.join(self.out_dir, f"{self._stream}.jsonl"))
        self._stream = None


def _write_rows(out_dir: str, fields: tuple[str, ...], rows: Iterable[Any]) -> Iterator[tuple[str, int]]:
    """mapPartitions: rows sorted by (stream, ts) -> files; yields (stream, tuples)."""
    files = _StreamFiles(out_dir)
    for row in rows:
        files.write(row["stream"], {k: row[k] for k in fields})
    files.close()
    yield from files.counts.items()


def _write_heatmaps(out_dir: str, emissions: dict[str, int], windows: list[str], grids: list[str],
                    rows: Iterable[Any]) -> Iterator[tuple[str, int]]:
    """mapPartitions: (player, n, cell, d) sorted by player -> the player's HM_* files."""
    files = _StreamFiles(out_dir)
    for player, group in itertools.groupby(rows, key=lambda r: r["player"]):
        buckets = [(r["n"], r["cell"], r["d"]) for r in group]
        for stream, ts, compact in heatmap_rows(player, emissions.get(player, 0), buckets, windows, grids):
            files.write(stream, {"ts": ts, "player": player, **compact})
    files.close()
    yield from files.counts.items()


def write_sorted(df: Any, out_dir: Path, fields: tuple[str, ...], order: tuple[str, ...] = ("ts",)) -> dict[str, int]:
    """Write a DataFrame with a ``stream`` column and ``fields``, one file per stream, in ``order``."""
    n = max(1, min(64, df.sparkSession.sparkContext.defaultParallelism * 4))
    ordered = df.repartition(n, "stream").sortWithinPartitions("stream", *order)
    return dict(ordered.rdd.mapPartitions(partial(_write_rows, str(out_dir), fields)).collect())


def write_streams(out_dir: Path, streams: dict[str, list[dict[str, Any]]], fields: tuple[str, ...]) -> dict[str, int]:
    """Write tuples held in the driver, one file per stream (in the given order)."""
    files = _StreamFiles(str(out_dir))
    for stream, tuples in streams.items():
        for t in tuples:
            files.write(stream, {k: t[k] for k in fields})
    files.close()
    return files.counts


def run_reference(spark: Any, data_dir: str | Path, out_dir: str | Path, *, windows: list[str] | None = None,
                  hm_windows: list[str] | None = None, grids: list[str] | None = None,
                  agg_period_ms: int = 20, heartbeat_ms: int = HEARTBEAT_MS) -> dict[str, Any]:
    """Compute the player averages and Q1 to Q3 of a split folder into ``out_dir``; returns a summary.

    ``heartbeat_ms`` is the period of the INTERRUPTIONS heartbeats the simulator feeds (0: none).
    """
    started = time.monotonic()
    data_dir, out_dir = Path(data_dir), Path(out_dir)
    windows = list(windows or WINDOWS)
    hm_windows = list(hm_windows or HM_WINDOWS)
    grids = list(grids or GRIDS)
    out_dir.mkdir(parents=True, exist_ok=True)
    streams = expected_streams(windows, hm_windows, grids)
    for stream in streams:  # the recorder leaves a file for every stream, even an empty one
        (out_dir / f"{stream}.jsonl").write_bytes(b"")
    rows = read_rows(spark, data_dir, sorted(SENSOR_OWNER))
    if rows is None:
        raise FileNotFoundError(f"{data_dir}: no SENSOR<sid>.csv of a player or the referee")
    counts: dict[str, int] = {}
    seconds: dict[str, float] = {}
    previous = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions(spark, data_dir)))
    try:
        summary = _run(spark, rows, out_dir, windows, hm_windows, grids, agg_period_ms, counts, seconds)
        t = time.monotonic()
        q2_summary = run_q2(spark, data_dir, out_dir, heartbeat_ms, with_shots=True)
        seconds["q2"] = time.monotonic() - t
        counts |= q2_summary.pop("counts")
        summary |= {**q2_summary, "tuples": sum(counts.values())}
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", previous)
    return {
        "data": str(data_dir), "out": str(out_dir), "streams": len(streams), **summary,
        "per_query_s": {k: round(v, 1) for k, v in seconds.items()},
        "seconds": round(time.monotonic() - started, 1), "master": spark.sparkContext.master,
    }


def shuffle_partitions(spark: Any, data_dir: Path) -> int:
    """About 64 MB of sensor CSV per shuffle partition, at least two per core: small inputs stay cheap."""
    size = sum(f.stat().st_size for f in data_dir.glob("SENSOR*.csv"))
    return max(2 * spark.sparkContext.defaultParallelism, min(400, size // (64 << 20) + 1))


def _run(spark: Any, rows: Any, out_dir: Path, windows: list[str], hm_windows: list[str], grids: list[str],
         agg_period_ms: int, counts: dict[str, int], seconds: dict[str, float]) -> dict[str, Any]:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    t = time.monotonic()
    pa = player_average(spark, rows, ENTITIES).persist(StorageLevel.MEMORY_AND_DISK)
    counts |= write_sorted(pa.withColumn("stream", F.col("player")), out_dir, PA_FIELDS)
    seconds["player_average"] = time.monotonic() - t

    t = time.monotonic()
    pt = counted_parts(pa, list(PLAYERS)).persist(StorageLevel.MEMORY_AND_DISK)
    run = run_current(pt).withColumn("stream", F.concat(F.lit("RUN_"), F.col("player")))
    counts |= write_sorted(run, out_dir, RUN_FIELDS)
    agg = run_aggregates(spark, pt, list(PLAYERS), windows, agg_period_ms)
    agg = agg.select(
        F.concat(F.lit("RUNAGG_"), F.col("window"), F.lit("_"), F.col("player")).alias("stream"), "ts", "player",
        *(c for i, b in enumerate(BANDS) for c in (
            F.col(f"t{i}").alias(f"{b}_time_ps"), (F.col(f"nm{i}").cast("double") / F.lit(1e9)).alias(f"{b}_distance")
        )),
    )
    counts |= write_sorted(agg, out_dir, RUNAGG_FIELDS)
    seconds["q1"] = time.monotonic() - t

    t = time.monotonic()
    last = {r["player"]: r["last_ts"] for r in pa.groupBy("player").agg(F.max("ts").alias("last_ts")).collect()}
    emissions = {p: boundaries_reached(last[p]) for p in PLAYERS if p in last}
    cs = cell_seconds(pa, list(PLAYERS))
    ordered = cs.repartition(len(PLAYERS), "player").sortWithinPartitions("player", "n", "cell")
    write = partial(_write_heatmaps, str(out_dir), emissions, hm_windows, grids)
    hm_counts = dict(ordered.rdd.mapPartitions(write).collect())
    missing = [p for p in emissions if not any(s.endswith(f"_{p}") for s in hm_counts)]
    if missing:  # players with samples but no counted time: all-zero maps, written here
        hm_counts |= dict(_write_heatmaps(str(out_dir), emissions, hm_windows, grids,
                                          ({"player": p, "n": 0, "cell": 0, "d": 0} for p in missing)))
    counts |= hm_counts
    seconds["q3"] = time.monotonic() - t
    for df in (pa, pt):
        df.unpersist()
    return {"tuples": sum(counts.values())}


def run_q2(spark: Any, data_dir: str | Path, out_dir: str | Path, heartbeat_ms: int = HEARTBEAT_MS,
           with_shots: bool = False) -> dict[str, Any]:
    """Compute Q2 of a split folder into ``out_dir`` (existing files of its streams are replaced).

    ``with_shots``: also Q4 (SHOTS, workers/reference_q4.py), which reads Q2's ACTIVEBALL and BALLHITS.
    """
    from pyspark.sql import functions as F

    data_dir, out_dir = Path(data_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    for stream in q2_streams() + (["SHOTS"] if with_shots else []):
        (out_dir / f"{stream}.jsonl").write_bytes(b"")
    result = q2(spark, data_dir, heartbeat_ms)
    if result.active is not None:
        active = result.active.withColumn("stream", F.lit("ACTIVEBALL"))
        counts |= write_sorted(active, out_dir, AB_FIELDS, order=KEY)
        if with_shots:
            found = shots(spark, result.active, segments(result.hits, interruption_events(data_dir, None, 0)), KEY)
            if found is not None:
                counts |= write_sorted(found.withColumn("stream", F.lit("SHOTS")), out_dir, SHOT_FIELDS, order=KEY)
                found.unpersist()
        result.active.unpersist()
    counts |= write_streams(out_dir, {"BALLHITS": result.hits}, HIT_FIELDS)
    counts |= write_streams(out_dir, result.players, BP_FIELDS)
    counts |= write_streams(out_dir, result.teams, TEAM_FIELDS)
    return {"counts": counts, "active_periods": result.periods}
