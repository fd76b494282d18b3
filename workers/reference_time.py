"""Batch reference: counted game time between consecutive player samples, as Spark columns.

Shared by the Q1 and Q3 reference jobs (docs/q1-q3.md, "Game clock"): the
interval ``[t_k, t_k+1)`` carries sample k's values; gaps over 1 s count
nothing; the rest is clipped to the halves (parts) and cut at game seconds
(pieces). Written from the definition, not from ``workers/gametime.py``.
"""

from __future__ import annotations

from typing import Any

from workers.debs import FIRST_HALF, PS_PER_S, SECOND_HALF

S1, E1 = FIRST_HALF
S2, E2 = SECOND_HALF
L1 = E1 - S1
GAME_SECONDS = (L1 + E2 - S2) // PS_PER_S
MAX_GAP_PS = PS_PER_S


def intervals(samples: Any, carry: list[str]) -> Any:
    """(player, ts, next_ts, *carry) for every non-gap interval between consecutive samples."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("player").orderBy("ts")
    return (
        samples.select("player", "ts", *carry)
        .withColumn("next_ts", F.lead("ts").over(w))
        .where(F.col("next_ts").isNotNull() & (F.col("next_ts") - F.col("ts") <= MAX_GAP_PS))
    )


def parts(iv: Any) -> Any:
    """Intervals clipped to each half: adds lo, hi (ts) and offset (game clock ``g = ts - offset``)."""
    from pyspark.sql import functions as F

    halves = F.array(
        F.struct(F.lit(S1).alias("start"), F.lit(E1).alias("end"), F.lit(S1).alias("offset")),
        F.struct(F.lit(S2).alias("start"), F.lit(E2).alias("end"), F.lit(S2 - L1).alias("offset")),
    )
    return (
        iv.withColumn("half", F.explode(halves))
        .withColumn("lo", F.greatest("ts", "half.start"))
        .withColumn("hi", F.least("next_ts", "half.end"))
        .withColumn("offset", F.col("half.offset"))
        .where(F.col("lo") < F.col("hi"))
        .drop("half")
    )


def pieces(pt: Any) -> Any:
    """Parts cut at game seconds: adds n (game second) and d (ps of the piece)."""
    from pyspark.sql import functions as F

    g, g_end = F.col("lo") - F.col("offset"), F.col("hi") - F.col("offset")
    first = F.expr(f"(lo - offset) div {PS_PER_S}")
    last = F.expr(f"(hi - offset - 1) div {PS_PER_S}")
    n = F.col("n")
    start = F.greatest(g, n * PS_PER_S)
    end = F.least(g_end, (n + 1) * PS_PER_S)
    return pt.withColumn("n", F.explode(F.sequence(first, last))).withColumn("d", end - start)
