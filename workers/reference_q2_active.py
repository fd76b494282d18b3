"""The active ball of the batch reference for Q2 (workers/reference_q2.py): ACTIVEBALL, and the order of ball rows.

**Active ball** (Spark). Only rows inside the halves count (a ball row in the
break resets the state), and only of the half's balls: rows of ball 12 before
the second kick-off are dropped first, as if it did not transmit. Per ball, its in-game rows form *runs*: maximal
sequences of consecutive rows inside the pitch, plus the ball's first row
outside after them (the *exit row*). A run ends without an exit row when the
break resets it or the ball's rows end; it *releases* the ball at its exit row
or at the break (never, if neither). The active periods are a chain: the first
inside row of any ball activates its ball, which stays active to the end of
that row's run; at the release point the first inside row of any ball after it
activates the next. Spark computes the runs (a window per ball) and, for each
release point and ball, the first inside row after it (an as-of lookup); the
driver follows the chain over that small table (one entry per run). ACTIVEBALL
is then every row of an active period's run from its activation row on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workers.debs import (
    BALLS,
    BALLS_FIRST_HALF,
    BALLS_SECOND_HALF,
    FIRST_HALF,
    SECOND_HALF,
    X_MAX,
    X_MIN,
    Y_MAX,
    Y_MIN,
)
from workers.reference_players import ROW_FIELDS, read_rows

S1, E1 = FIRST_HALF
S2, E2 = SECOND_HALF
KEY = ("ts", "bpos", "blk", "rid")  # total order of ball rows
AB_FIELDS = ROW_FIELDS[1:2] + ROW_FIELDS[:1] + ROW_FIELDS[2:]  # ts, sid, x, …, az

Key = tuple[int, int, int, int]


def key_of(row: Any) -> Key:
    return (row["ts"], row["bpos"], row["blk"], row["rid"])


# --- active ball ----------------------------------------------------------------------------------

def ball_rows(spark: Any, data_dir: Path) -> tuple[Any, bool] | None:
    """In-game ball rows with KEY columns, ``inside`` and ``half``; and whether a ball row lies in the break."""
    from pyspark.sql import functions as F

    rows = read_rows(spark, data_dir, list(BALLS), fields=ROW_FIELDS, nonnegative=False)
    if rows is None:
        return None
    ts = F.col("ts")
    bpos = F.array_position(F.array(*(F.lit(b) for b in BALLS)), F.col("sid")).cast("int") - 1
    rows = rows.select(*AB_FIELDS, bpos.alias("bpos"), F.col("pos.block").alias("blk"), F.col("pos.id").alias("rid"))
    # A ball not in play in its half (12 before the second kick-off) is ignored, as if it did not transmit.
    in_play = F.col("sid").isin(*BALLS_SECOND_HALF) & ((ts >= S2) | F.col("sid").isin(*BALLS_FIRST_HALF))
    rows = rows.where(in_play)
    break_reset = rows.where((ts > E1) & (ts < S2)).limit(1).count() > 0
    in_game = ts.between(S1, E1) | ts.between(S2, E2)
    inside = F.col("x").between(X_MIN, X_MAX) & F.col("y").between(Y_MIN, Y_MAX)
    return (rows.where(in_game).withColumn("inside", inside).withColumn("half", F.when(ts <= E1, 1).otherwise(2)),
            break_reset)


def ball_runs(rows: Any, break_reset: bool) -> Any:
    """Adds ``run`` (per ball, counted from 1) to inside rows and exit rows."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("sid").orderBy("ts", "blk", "rid")
    lagged = rows.select("*", F.lag("inside").over(w).alias("prev_inside"), F.lag("half").over(w).alias("prev_half"))
    # Consecutive rows of the ball with no reset between them (a ball row in the break resets).
    cont = F.col("prev_inside").isNotNull() & (F.lit(not break_reset) | (F.col("prev_half") == F.col("half")))
    starts = F.col("inside") & ~(cont & F.col("prev_inside"))
    exits = ~F.col("inside") & cont & F.col("prev_inside")
    upto = w.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    counted = lagged.select("*", exits.alias("exit"), F.sum(starts.cast("long")).over(upto).alias("n"))
    return counted.select(
        *AB_FIELDS, *KEY[1:], "inside", "half", "exit",
        F.when(F.col("inside") | F.col("exit"), F.col("n")).alias("run"),
    )


def _next_inside(spark: Any, runs: Any, markers: list[Key]) -> dict[tuple[Key, int], tuple[Key, int]]:
    """(marker, ball) -> (key, run) of the ball's first inside row after the marker."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if not markers:
        return {}
    k = F.struct(*KEY)
    marks = spark.createDataFrame([(*m, sid) for m in markers for sid in BALLS],
                                  "ts long, bpos int, blk long, rid long, sid long")
    marks = marks.select("sid", k.alias("k"), F.lit(None).cast("long").alias("run"), F.lit(True).alias("marker"))
    inside = runs.where("inside").select("sid", k.alias("k"), "run", F.lit(False).alias("marker"))
    # Descending: the rows already passed are the later ones, the last of them the nearest.
    w = Window.partitionBy("sid").orderBy(F.col("k").desc()).rowsBetween(Window.unboundedPreceding, Window.currentRow)
    nxt = F.last(F.when(~F.col("marker"), F.struct("k", "run")), ignorenulls=True).over(w)
    found = inside.unionByName(marks).select("sid", "k", "marker", nxt.alias("next")).where("marker")
    return {(key_of(r["k"]), r["sid"]): (key_of(r["next"]["k"]), r["next"]["run"])
            for r in found.collect() if r["next"] is not None}


def active_periods(spark: Any, runs: Any, break_reset: bool) -> list[tuple[int, int, Key]]:
    """The chain of active periods: (ball, run, activation key)."""
    from pyspark.sql import functions as F

    k = F.struct(*KEY)
    table = runs.where(F.col("run").isNotNull()).groupBy("sid", "run").agg(
        F.min(F.when(F.col("inside"), k)).alias("start"), F.max(k).alias("end"),
        F.max(F.col("exit").cast("int")).alias("exit"), F.max("half").alias("half"),
    ).collect()
    info = {(r["sid"], r["run"]): r for r in table}
    break_marker: Key = (E1, len(BALLS), 0, 0)  # after every row of the first half, before the second

    def release(r: Any) -> Key | None:
        if r["exit"]:
            return key_of(r["end"])
        return break_marker if break_reset and r["half"] == 1 else None

    markers = sorted({m for r in table if (m := release(r)) is not None})
    after = _next_inside(spark, runs, markers)
    periods: list[tuple[int, int, Key]] = []
    act = min(((key_of(r["start"]), r["sid"], r["run"]) for r in table), default=None)
    while act is not None:
        key, sid, run = act
        r = info[(sid, run)]
        periods.append((sid, run, key))
        mark = release(r)
        if mark is None:
            break
        found = [(after[(mark, b)][0], b, after[(mark, b)][1]) for b in BALLS if (mark, b) in after]
        act = min(found, default=None)
    return periods
