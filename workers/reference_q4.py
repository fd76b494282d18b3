"""Batch reference for Q4 (shot on goal): the SHOTS stream, from Q2's ACTIVEBALL and BALLHITS.

Written from the Q4 rules of the README's query section and the shots
component's docstring (workers/shots.py), without importing the component; it
uses the shots component's default parameters, as the shipped workflows do.
The component sees INTERRUPTIONS, BALLHITS and ACTIVEBALL merged in (ts, input)
order, so at equal ts an interruption comes before a hit and a hit before the
ball rows; this job orders its events the same way.

**Counted hits and segments** (driver). Hits while play is interrupted (from a
``begin`` to its ``end``; an ``end`` comes before a ``begin`` of equal ts) are
not counted. Each counted hit opens a *segment* of ACTIVEBALL rows: those with
ts at or after the hit and before the next counted hit or the next ``begin``,
whichever comes first (their own ball rows of that ts come after them).

**Decision** (Spark, grouped by segment). The segment's first row that is
outside the pitch, or has |a| below 55 m/s², or is at least 25 ms after the
hit decides. An outside row means no shot. Otherwise the ball's path is
projected from that row: velocity |v| times the unit vector (vx, vy, vz)/10000,
flying with air drag, bouncing and rolling as workers/ballflight.py computes
it (the physics, shared with the streaming detector, is not the rule under
test here); it is a shot when the path reaches the goal line of the goal the
hitter's team attacks within 1.5 s, strictly between the posts and below the
bar.

**Shot rows** (Spark). A shot's rows are its segment's rows up to, not
including, the first row outside the pitch; after the deciding row only those
at or before the end of the hit's half (or 1.5 s after the hit, outside the
halves). Shots are numbered 1, 2, ... in hit order.

Rows are assigned to segments by an equi-join on 1 s buckets (each segment is
listed in every bucket it overlaps), so no step compares every row with every
segment.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from workers.ballflight import goal_line_crossing
from workers.debs import HALVES, PLAYER_SENSORS, PS_PER_MS, PS_PER_S, attacked_goal, half_of

SHOT_FIELDS = ("ts", "shot", "player", "x", "y", "z", "v", "vx", "vy", "vz", "a", "ax", "ay", "az")
HORIZON_S = 1.5
THRESHOLD = 55_000_000  # µm/s²
SETTLE_PS = 25 * PS_PER_MS
BUCKET_PS = PS_PER_S
NO_STOP = 1 << 62


@dataclass(frozen=True)
class Segment:
    """The ball rows a counted hit can make a shot of: ts in [start, stop)."""

    start: int
    stop: int
    player: str


def segments(hits: Iterable[dict[str, Any]], interruptions: Iterable[tuple[int, int, str]]) -> list[Segment]:
    """Counted hits in input order, each with the ts of the next counted hit or ``begin`` after it.

    ``interruptions``: (ts, rank, event) with rank 0 for ``end`` and 1 for ``begin``
    (workers.reference_q2_interruptions.interruption_events); heartbeats change nothing here.
    """
    events: list[tuple[int, int, int, str, str]] = [
        (ts, rank, 0, kind, "") for ts, rank, kind in interruptions if kind in ("begin", "end")
    ]
    events += [(h["ts"], 2, n, "hit", h["player"]) for n, h in enumerate(hits) if h["player"] in PLAYER_SENSORS]
    events.sort(key=lambda e: e[:3])
    found: list[Segment] = []
    open_hit: tuple[int, str] | None = None
    interrupted = False

    def close(at: int) -> None:
        if open_hit is not None:
            found.append(Segment(open_hit[0], at, open_hit[1]))

    for ts, _rank, _n, kind, player in events:
        if kind == "end":
            interrupted = False
        elif kind == "begin":
            close(ts)
            open_hit, interrupted = None, True
        elif not interrupted:
            close(ts)
            open_hit = (ts, player)
    close(NO_STOP)
    return found


def on_target(row: Any, player: str, hit_ts: int) -> bool:
    """Does the ball, leaving ``row``'s position with its velocity, cross the attacked goal's mouth in time?"""
    goal = attacked_goal(player[0], half_of(hit_ts))
    speed = row["v"] * 1e-6  # µm/s -> m/s
    velocity = tuple(row[c] / 10_000 * speed for c in ("vx", "vy", "vz"))
    position = (row["x"] / 1000, row["y"] / 1000, row["z"] / 1000)
    crossing = goal_line_crossing(position, velocity, goal.y / 1000, HORIZON_S)
    if crossing is None:
        return False
    _t, x, z = crossing
    return goal.x_min < x * 1000 < goal.x_max and z * 1000 < goal.z_max


def shot_end(hit_ts: int) -> int:
    """The last ts a shot started at ``hit_ts`` can have rows at (after its deciding row)."""
    return next((end for start, end in HALVES if start <= hit_ts <= end), hit_ts + round(HORIZON_S * PS_PER_S))


def shots(spark: Any, active: Any, found: list[Segment], key: tuple[str, ...]) -> Any:
    """DataFrame of SHOT_FIELDS plus ``key`` columns; ``active`` is ACTIVEBALL with ``key`` and ``inside``.

    ``key`` orders ACTIVEBALL rows (its first column is ts); None when there is no shot.
    """
    from pyspark.sql import functions as F

    if not found:
        return None
    last = active.agg(F.max("ts")).first()[0]
    if last is None:
        return None
    table = []
    for n, seg in enumerate(found):
        stop = min(seg.stop, last + 1)
        table += [(b, n, seg.start, seg.stop) for b in range(seg.start // BUCKET_PS, (stop - 1) // BUCKET_PS + 1)]
    buckets = spark.createDataFrame(table, "bucket long, seg int, start long, stop long")
    ts = F.col("ts")
    tagged = (
        active.withColumn("bucket", F.expr(f"ts div {BUCKET_PS}"))
        .join(F.broadcast(buckets), "bucket")
        .where((ts >= F.col("start")) & (ts < F.col("stop")))
    ).persist()
    try:
        k = F.struct(*key)
        decisive = ~F.col("inside") | (F.col("a") < THRESHOLD) | (ts >= F.col("start") + SETTLE_PS)
        row = F.struct(k.alias("k"), "inside", *SHOT_FIELDS[3:])
        summary = (
            tagged.groupBy("seg")
            .agg(F.min(F.when(decisive, row)).alias("decider"), F.min(F.when(~F.col("inside"), k)).alias("exit"))
            .collect()
        )
        chosen = []
        for r in sorted(summary, key=lambda r: r["seg"]):
            decider, seg = r["decider"], found[r["seg"]]
            if decider is None or not decider["inside"] or not on_target(decider, seg.player, seg.start):
                continue
            chosen.append((r["seg"], len(chosen) + 1, seg.player, decider["k"], r["exit"], shot_end(seg.start)))
        if not chosen:
            return None
        kt = ",".join(f"{c}:{active.schema[c].dataType.simpleString()}" for c in key)
        table_df = spark.createDataFrame(
            chosen, f"seg int, shot long, player string, dk struct<{kt}>, ek struct<{kt}>, until long"
        )
        joined = tagged.join(F.broadcast(table_df), "seg")
        keep = (F.col("ek").isNull() | (k < F.col("ek"))) & ((k <= F.col("dk")) | (ts <= F.col("until")))
        result = joined.where(keep).select(*SHOT_FIELDS, *key[1:]).persist()
        result.count()  # computed while the tagged rows are still cached; the caller unpersists it
        return result
    finally:
        tagged.unpersist()
