"""Batch reference, part 1: read a split folder and compute the player averages in Spark.

Independent of ``workers/players.py``: the same rule (docs/q1-q3.md), written as
DataFrame operations. A player emits at the end ``B = (c+1)·20 ms`` of every
slot ``c`` holding one of its rows except its last; each sensor contributes its
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


def read_rows(spark: Any, data_dir: Path, sids: list[int]) -> Any:
    """Valid rows (sid, ts, x, y, z, v, a, pos) of ``sids``; ``pos`` orders equal ts of a sensor by file order."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType

    files = sensor_files(data_dir, sids)
    if not files:
        return None
    schema = StructType([StructField(name, LongType()) for name in ROW_FIELDS])
    df = spark.read.csv(files, schema=schema, header=False, mode="PERMISSIVE")
    # Blocks of one file are read sequentially by one task each: (block start, id) is file order.
    pos = F.struct(F.col("_metadata.file_block_start").alias("block"), F.monotonically_increasing_id().alias("id"))
    df = df.select(*ROW_FIELDS[:7], pos.alias("pos"))
    ok = F.lit(True)
    for name in ROW_FIELDS[:7]:
        ok = ok & F.col(name).isNotNull()
    return df.where(ok & (F.col("v") >= 0) & (F.col("a") >= 0) & F.col("sid").isin(sids))


def entity_map(spark: Any, entities: list[str]) -> Any:
    """(player, sid) for every sensor of ``entities``."""
    rows = [(p, sid) for p in entities for sid in ENTITY_SENSORS[p]]
    return spark.createDataFrame(rows, "player string, sid long")


def player_average(spark: Any, rows: Any, entities: list[str]) -> Any:
    """DataFrame (player, ts, x, y, z, v, a): the player_average tuples of ``entities``."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    sensors = F.broadcast(entity_map(spark, entities))
    slot = F.expr(f"ts div {SLOT_PS}")
    latest_in_slot = (
        rows.withColumn("slot", slot)
        .groupBy("sid", "slot")
        .agg(F.max_by(F.struct(*("ts", *AVG_FIELDS)), F.struct("ts", "pos")).alias("row"))
        .join(sensors, "sid")
    )
    player_slots = latest_in_slot.select("player", "slot").distinct()
    last_slot = player_slots.groupBy("player").agg(F.max("slot").alias("last_slot"))
    grid = player_slots.join(last_slot, "player").where(F.col("slot") < F.col("last_slot")).join(sensors, "player")
    w = Window.partitionBy("sid").orderBy("slot").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    boundary = (F.col("slot") + 1) * SLOT_PS
    asof = (
        grid.join(latest_in_slot.select("sid", "slot", "row"), ["sid", "slot"], "left")
        .withColumn("row", F.last("row", ignorenulls=True).over(w))
        .where(F.col("row").isNotNull() & (F.col("row.ts") >= boundary - STALE_PS))
    )
    sums = [F.sum(f"row.{f}").alias(f) for f in AVG_FIELDS]
    means = [(F.col(f).cast("double") / F.col("n").cast("double")).alias(f) for f in AVG_FIELDS]
    return (
        asof.groupBy("player", "slot")
        .agg(F.count("*").alias("n"), *sums)
        .select("player", ((F.col("slot") + 1) * SLOT_PS).alias("ts"), *means)
    )
