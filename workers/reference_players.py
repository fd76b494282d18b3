"""Batch reference, part 1: read a split folder and compute the player averages in Spark.

Independent of ``workers/players.py``: the same rule (docs/q1-q3.md), written as
DataFrame operations. A player emits at the end ``B = (c+1)·20 ms`` of every
slot ``c`` holding one of its rows, its last included; each sensor contributes its
latest row with ``ts < B`` if that row is at most 1 s old, and the fields are
``int sum / n`` (exact in doubles). Only the latest row of each sensor per slot
matters, so rows are first reduced to one per (sensor, slot); the latest row
before each boundary is then an ordered ``last(..., ignorenulls)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workers.debs import PLAYER_SENSORS, PS_PER_MS, PS_PER_S, REFEREE, REFEREE_SENSORS

SLOT_PS = 20 * PS_PER_MS
STALE_PS = PS_PER_S
ROW_FIELDS = ("sid", "ts", "x", "y", "z", "v", "a", "vx", "vy", "vz", "ax", "ay", "az")
AVG_FIELDS = ("x", "y", "z", "v", "a")
ENTITY_SENSORS: dict[str, tuple[int, ...]] = {**PLAYER_SENSORS, REFEREE: REFEREE_SENSORS}


def sensor_files(data_dir: Path, sids: list[int]) -> list[str]:
    """The SENSOR<sid>.csv files of ``sids`` that exist in the split folder."""
    return [str(data_dir / f"SENSOR{sid}.csv") for sid in sids if (data_dir / f"SENSOR{sid}.csv").is_file()]


def read_rows(spark: Any, data_dir: Path, sids: list[int], fields: tuple[str, ...] = ROW_FIELDS[:7],
              nonnegative: bool = True) -> Any:
    """Valid rows (``fields``, pos) of ``sids``; ``pos`` orders equal ts of a sensor by file order.

    A row is valid when every one of ``fields`` is an integer and, with ``nonnegative``
    (the player average's rule), ``v >= 0`` and ``a >= 0``.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType

    files = sensor_files(data_dir, sids)
    if not files:
        return None
    schema = StructType([StructField(name, LongType()) for name in ROW_FIELDS])
    df = spark.read.csv(files, schema=schema, header=False, mode="PERMISSIVE")
    # Blocks of one file are read sequentially by one task each: (block start, id) is file order.
    pos = F.struct(F.col("_metadata.file_block_start").alias("block"), F.monotonically_increasing_id().alias("id"))
    df = df.select(*fields, pos.alias("pos"))
    ok = F.col("sid").isin(sids)
    for name in fields:
        ok = ok & F.col(name).isNotNull()
    if nonnegative:
        ok = ok & (F.col("v") >= 0) & (F.col("a") >= 0)
    return df.where(ok)


def player_average(spark: Any, rows: Any, entities: list[str]) -> Any:
    """DataFrame (player, ts, x, y, z, v, a): the player_average tuples of ``entities``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    pairs = [(p, sid, k) for p in entities for k, sid in enumerate(ENTITY_SENSORS[p])]
    sensors = F.broadcast(spark.createDataFrame(pairs, "player string, sid long, k int"))
    width = max(len(ENTITY_SENSORS[p]) for p in entities)
    latest_in_slot = (
        rows.withColumn("slot", F.expr(f"ts div {SLOT_PS}"))
        .groupBy("sid", "slot")
        .agg(F.max_by(F.struct("ts", *AVG_FIELDS), F.struct("ts", "pos")).alias("row"))
        .join(sensors, "sid")
    )
    # Per player in slot order, each sensor's latest row so far; the last row of a slot sees them all.
    w = Window.partitionBy("player").orderBy("slot", "k")
    upto = w.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    latest = [F.last(F.when(F.col("k") == k, F.col("row")), ignorenulls=True).over(upto).alias(f"s{k}")
              for k in range(width)]
    boundary = (F.col("slot") + 1) * SLOT_PS
    fresh = [F.col(f"s{k}").isNotNull() & (F.col(f"s{k}.ts") >= boundary - STALE_PS) for k in range(width)]
    n = sum((f.cast("long") for f in fresh), F.lit(0))
    sums = {
        f: sum((F.when(fresh[k], F.col(f"s{k}.{f}")).otherwise(F.lit(0)) for k in range(width)), F.lit(0))
        for f in AVG_FIELDS
    }
    return (
        latest_in_slot.select("player", "slot", *latest, F.lead("slot").over(w).alias("next_slot"))
        .where(F.col("next_slot").isNull() | (F.col("next_slot") != F.col("slot")))
        .select("player", boundary.alias("ts"), n.alias("n"), *(sums[f].alias(f) for f in AVG_FIELDS))
        .where(F.col("n") > 0)
        .select("player", "ts", *((F.col(f).cast("double") / F.col("n").cast("double")).alias(f) for f in AVG_FIELDS))
    )
