"""Batch reference for Q1 (running analysis) in Spark DataFrames.

Rules from docs/q1-q3.md, computed without the streaming component:
- an interval between consecutive samples runs at the speed of the straight
  step between their (x, y) positions: ``sqrt(dx*dx + dy*dy) * 1e15 / dt``
  µm/s (distance is the path length of the averaged position);
- each counted part (interval clipped to a half) has that speed's band and
  ``nm = sum over its pieces of floor(v * d / 1e9)``;
- segments are gaps-and-islands: a part starts a new one unless it continues
  the previous part (same band, previous ``hi == lo``);
- a tuple is emitted after a part whose ``ceil(hi / period)`` is new;
- a window of W s at an emission with ``c = ceil(g_end / 1 s)`` holds every
  piece processed so far with game second ``>= c - W``: the running totals up
  to this part minus the totals of all game seconds ``< c - W`` (those are
  complete by then, as pieces come in game-second order).
"""

from __future__ import annotations

from typing import Any

from workers.debs import PS_PER_MS, PS_PER_S, WINDOWS
from workers.reference_time import GAME_SECONDS, intervals, parts, piece_columns

BANDS = ("standing", "trot", "low", "medium", "high", "sprint")
LIMITS_KMH = (1.0, 11.0, 14.0, 17.0, 24.0)
SLOT_PS = 20 * PS_PER_MS


def band_column() -> Any:
    """Band index from ``v`` (µm/s, double): km/h = v * 3.6e-6, upper limits inclusive."""
    from pyspark.sql import functions as F

    kmh = F.col("v") * F.lit(3.6e-6)
    expr = F.lit(len(LIMITS_KMH))
    for i in reversed(range(len(LIMITS_KMH))):
        expr = F.when(kmh <= F.lit(LIMITS_KMH[i]), F.lit(i)).otherwise(expr)
    return expr


def _ceil_div(col: str, q: int) -> Any:
    from pyspark.sql import functions as F

    return F.expr(f"({col} + {q - 1}) div {q}")


def counted_parts(samples: Any, players: list[str]) -> Any:
    """Counted parts of ``players``: (player, lo, hi, offset, band, nm, pieces[(n, d, nm)])."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("player").orderBy("ts")
    x, y = F.col("x").cast("double"), F.col("y").cast("double")
    dx, dy = F.lead(x).over(w) - x, F.lead(y).over(w) - y
    dt = (F.lead("ts").over(w) - F.col("ts")).cast("double")
    step_v = F.sqrt(dx * dx + dy * dy) * F.lit(1e15) / dt  # null for a player's last sample (no interval)
    from_players = samples.where(F.col("player").isin(players)).select("player", "ts", step_v.alias("v"))
    pt = parts(intervals(from_players, ["v"]).withColumn("band", band_column()))
    pt = pt.withColumn("pieces", piece_columns(F.col("v")))
    nm = F.aggregate("pieces", F.lit(0).cast("long"), lambda acc, p: acc + p["nm"])
    return pt.select("player", "lo", "hi", "offset", "band", nm.alias("nm"), "pieces")


def run_current(pt: Any) -> Any:
    """RUN_<p> tuples: (player, ts, ts_start, ts_stop, intensity, distance, speed)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("player").orderBy("lo")
    upto = w.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    new_seg = (
        F.lag("hi").over(w).isNull() | (F.lag("hi").over(w) != F.col("lo")) | (F.lag("band").over(w) != F.col("band"))
    )
    slot = _ceil_div("hi", SLOT_PS)
    names = F.element_at(F.array(*(F.lit(b) for b in BANDS)), F.col("band") + 1)
    distance = F.col("seg_nm").cast("double") / F.lit(1e9)
    # Same window throughout (one sort): a segment's nm is the running nm minus the running nm before its start.
    seg = pt.select("player", "lo", "hi", "band", "nm", new_seg.alias("new"), F.sum("nm").over(upto).alias("cum"),
                    slot.alias("slot"), F.lag(slot).over(w).alias("prev_slot"))
    return (
        seg.select(
            "*", F.last(F.when(F.col("new"), F.col("lo")), ignorenulls=True).over(upto).alias("seg_start"),
            (F.col("cum") - F.last(F.when(F.col("new"), F.col("cum") - F.col("nm")), ignorenulls=True).over(upto))
            .alias("seg_nm"),
        )
        .where(F.col("prev_slot").isNull() | (F.col("slot") > F.col("prev_slot")))
        .select(
            "player", F.col("hi").alias("ts"), F.col("seg_start").alias("ts_start"), F.col("hi").alias("ts_stop"),
            names.alias("intensity"), distance.alias("distance"),
            (distance * F.lit(3.6e12) / (F.col("hi") - F.col("seg_start")).cast("double")).alias("speed"),
        )
    )


def _band_sums(prefix: str, d: Any, nm: Any) -> list[Any]:
    from pyspark.sql import functions as F

    out = []
    for i in range(len(BANDS)):
        out.append(F.sum(F.when(F.col("band") == i, d).otherwise(F.lit(0))).alias(f"{prefix}t{i}"))
        out.append(F.sum(F.when(F.col("band") == i, nm).otherwise(F.lit(0))).alias(f"{prefix}nm{i}"))
    return out


def _cumulative_seconds(spark: Any, pt: Any, players: list[str]) -> Any:
    """(player, m, bt0, bnm0, …): totals of all pieces in game seconds ``<= m``, for every m."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    pc = pt.select("player", "band", F.explode("pieces").alias("p")).select("player", "band", "p.*")
    per_second = pc.groupBy("player", "n").agg(*_band_sums("s", F.col("d"), F.col("nm")))
    dense = spark.range(0, GAME_SECONDS).withColumnRenamed("id", "n").crossJoin(
        spark.createDataFrame([(p,) for p in players], "player string")
    )
    w = Window.partitionBy("player").orderBy("n").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    cols = [c for i in range(len(BANDS)) for c in (f"t{i}", f"nm{i}")]
    return dense.join(per_second, ["player", "n"], "left").select(
        "player", F.col("n").alias("m"), *(F.sum(F.coalesce(F.col(f"s{c}"), F.lit(0))).over(w).alias(f"b{c}")
                                           for c in cols)
    )


def run_aggregates(spark: Any, pt: Any, players: list[str], windows: list[str],
                   agg_period_ms: int = 20) -> Any:
    """RUNAGG tuples of every window: (window, player, ts, t0, nm0, …, t5, nm5) with ints."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("player").orderBy("lo")
    upto = w.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    cols = [c for i in range(len(BANDS)) for c in (f"t{i}", f"nm{i}")]
    running = [
        F.sum(F.when(F.col("band") == i, F.col("hi") - F.col("lo")).otherwise(F.lit(0))).over(upto).alias(f"t{i}")
        for i in range(len(BANDS))
    ] + [F.sum(F.when(F.col("band") == i, F.col("nm")).otherwise(F.lit(0))).over(upto).alias(f"nm{i}")
         for i in range(len(BANDS))]
    slot = _ceil_div("hi", agg_period_ms * PS_PER_MS)
    lengths = [(name, None if WINDOWS[name] is None else WINDOWS[name] // PS_PER_S) for name in windows]
    chosen = F.broadcast(spark.createDataFrame(lengths, "window string, seconds long"))
    emissions = (
        pt.select("*", *running, slot.alias("slot"), _ceil_div("hi - offset", PS_PER_S).alias("current"))
        .withColumn("prev_slot", F.lag("slot").over(w))
        .where(F.col("prev_slot").isNull() | (F.col("slot") > F.col("prev_slot")))
        .select("player", F.col("hi").alias("ts"), "current", *cols)
        .crossJoin(chosen)
        .withColumn("m", F.col("current") - F.col("seconds") - 1)  # null for the whole game
    )
    cumulative = F.broadcast(_cumulative_seconds(spark, pt, players))
    return emissions.join(cumulative, ["player", "m"], "left").select(
        "window", "player", "ts", *((F.col(c) - F.coalesce(F.col(f"b{c}"), F.lit(0))).alias(c) for c in cols)
    )
