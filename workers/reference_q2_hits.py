"""Ball hits of the batch reference for Q2 (workers/reference_q2.py): BALLHITS, from the ACTIVEBALL rows.

**Ball hits** (Spark). Take the ACTIVEBALL rows with ``a >= 55 m/s²`` in
stream order; a spike starts at such a row unless the previous one is of the
same ball and less than 10 ms earlier (rows under the threshold in between do
not matter). For every spike row, each player
sensor's latest row at or before it (equal ts counts) is looked up with an
as-of window over only the player rows near spikes; the row must be at most
250 ms old and within 1 m (3-D). The nearest sensor's player is the hitter; a
tie goes to the sensor the detector saw first (earliest first row, then input
order). A spike's hit is its first row that has a hitter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workers.debs import PLAYER_SENSORS, PS_PER_MS
from workers.reference_players import read_rows
from workers.reference_q2_active import AB_FIELDS, KEY, key_of

THRESHOLD = 55_000_000  # µm/s² (55 m/s²)
RADIUS_MM = 1000
STALE_PS = 250 * PS_PER_MS
REARM_PS = 10 * PS_PER_MS  # a spike's rows over the threshold are less than this apart
#: The hit detector's player inputs, in input order (ties in "seen first" go by this order).
HIT_SENSORS = [sid for sids in PLAYER_SENSORS.values() for sid in sids]
SENSOR_PLAYER = {sid: p for p, sids in PLAYER_SENSORS.items() for sid in sids}
HIT_FIELDS = ("ts", "player", "sid", "x", "y", "z", "a")


# --- ball hits ------------------------------------------------------------------------------------

def _hitters(spark: Any, data_dir: Path, cand: Any) -> Any:
    """(ck, player): the hitter of every spike row that has one."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    players = read_rows(spark, data_dir, HIT_SENSORS, fields=("sid", "ts", "x", "y", "z"), nonnegative=False)
    if players is None:
        return None
    firsts = {r["sid"]: r["first"] for r in players.groupBy("sid").agg(F.min("ts").alias("first")).collect()}
    seen = sorted(firsts, key=lambda sid: (firsts[sid], HIT_SENSORS.index(sid)))
    sensors = F.broadcast(spark.createDataFrame([(sid, SENSOR_PLAYER[sid], n) for n, sid in enumerate(seen)],
                                                "sid long, player string, seen int"))
    # Only player rows at most one stale period before a spike row's bin can be the latest fresh one.
    bin_of = F.expr(f"ts div {STALE_PS}")
    bins = cand.select(F.explode(F.array(bin_of, bin_of - 1)).alias("bin")).distinct()
    near = players.withColumn("bin", bin_of).join(F.broadcast(bins), "bin", "left_semi")
    rows = near.select("sid", "ts", F.lit(0).alias("kind"), F.col("pos.block").alias("blk"),
                       F.col("pos.id").alias("rid"), "x", "y", "z")
    lookups = cand.select(F.col("ck"), F.col("ts"), F.col("x").alias("bx"), F.col("y").alias("by"),
                          F.col("z").alias("bz")).crossJoin(sensors.select("sid"))
    u = rows.unionByName(lookups.withColumn("kind", F.lit(1)), allowMissingColumns=True)
    # Player rows sort before a ball row of equal ts (they come first in the detector's input).
    w = Window.partitionBy("sid").orderBy("ts", "kind", "blk", "rid").rowsBetween(Window.unboundedPreceding,
                                                                                  Window.currentRow)
    latest = F.last(F.when(F.col("kind") == 0, F.struct("ts", "x", "y", "z")), ignorenulls=True).over(w)
    found = u.select("sid", "ck", "ts", "bx", "by", "bz", "kind", latest.alias("s")).where(
        (F.col("kind") == 1) & F.col("s").isNotNull() & (F.col("s.ts") >= F.col("ts") - STALE_PS)
    )
    dx, dy, dz = (F.col(f"s.{c}") - F.col(f"b{c}") for c in "xyz")
    close = (F.abs(dx) <= RADIUS_MM) & (F.abs(dy) <= RADIUS_MM) & (F.abs(dz) <= RADIUS_MM)  # longs stay small
    d = dx * dx + dy * dy + dz * dz
    within = found.where(close).withColumn("d", d).where(F.col("d") <= RADIUS_MM * RADIUS_MM).join(sensors, "sid")
    return within.groupBy("ck").agg(F.min_by("player", F.struct("d", "seen")).alias("player"))


def ball_hits(spark: Any, data_dir: Path, active: Any) -> list[dict[str, Any]]:
    """BALLHITS tuples in stream order (with their ACTIVEBALL key as ``_key``)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    k = F.struct(*KEY)
    cand = active.where(F.col("a") >= THRESHOLD).select(*AB_FIELDS, *KEY[1:], k.alias("ck"))
    order = Window.orderBy("ck")  # every ball's rows over the threshold, in ACTIVEBALL order
    same = (F.lag("sid").over(order) == F.col("sid")) & (F.col("ts") - F.lag("ts").over(order) < REARM_PS)
    cand = cand.withColumn("start", ~F.coalesce(same, F.lit(False)))
    running = order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    cand = cand.withColumn("spike", F.sum(F.col("start").cast("long")).over(running)).persist()
    try:
        hitters = _hitters(spark, data_dir, cand)
        if hitters is None:
            return []
        rows = cand.join(hitters, "ck").groupBy("sid", "spike").agg(
            F.min_by(F.struct("ck", *HIT_FIELDS), F.col("ck")).alias("h")
        ).select("h.*").collect()
    finally:
        cand.unpersist()
    rows.sort(key=lambda r: key_of(r["ck"]))
    return [{**{f: r[f] for f in HIT_FIELDS}, "_key": key_of(r["ck"])} for r in rows]
