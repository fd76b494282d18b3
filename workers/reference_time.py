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


def piece_columns(value: Any | None = None) -> Any:
    """The part's pieces as an array of 1 or 2 structs (n, d[, nm]): a part lasts at most 1 s.

    ``nm = floor(value * d / 1e9)`` per piece when ``value`` (a double column) is given.
    """
    from pyspark.sql import functions as F

    g, g_end = F.col("lo") - F.col("offset"), F.col("hi") - F.col("offset")
    n0 = F.expr(f"(lo - offset) div {PS_PER_S}")
    n1 = F.expr(f"(hi - offset - 1) div {PS_PER_S}")
    cut = (n0 + 1) * PS_PER_S

    def piece(n: Any, d: Any) -> Any:
        fields = [n.alias("n"), d.alias("d")]
        if value is not None:
            fields.append(F.floor(value * d.cast("double") / F.lit(1e9)).alias("nm"))
        return F.struct(*fields)

    one = F.array(piece(n0, g_end - g))
    two = F.array(piece(n0, cut - g), piece(n1, g_end - cut))
    return F.when(n0 == n1, one).otherwise(two)
