"""Batch reference for Q2 (ball possession): ACTIVEBALL, BALLHITS, BP_<player>, BP_<window>_<team>.

Written from the rules in DESIGN §6 and the docstrings of the streaming
components (workers/ball.py, hits.py, possession.py), without importing them.
Every component sees its inputs in (ts, input position) order, so the batch
job orders rows the same way: ball rows by ``(ts, position of the ball in
debs.BALLS, file order)``, and at equal ts INTERRUPTIONS before BALLHITS before
ACTIVEBALL (possession), player sensors before ACTIVEBALL (hits).

The parts are apart, each with its rules: the active ball (workers/reference_q2_active.py), the ball hits
(workers/reference_q2_hits.py), possession (workers/reference_q2_possession.py) and the INTERRUPTIONS
events (workers/reference_q2_interruptions.py); this module runs them in turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workers.debs import PLAYERS, TEAMS, WINDOWS
from workers.reference_q2_active import E1, E2, KEY, Key, active_periods, ball_rows, ball_runs, key_of
from workers.reference_q2_hits import HIT_FIELDS, ball_hits
from workers.reference_q2_interruptions import HEARTBEAT_MS, data_span, interruption_events
from workers.reference_q2_possession import BUCKET_PS, possession


def q2_streams() -> list[str]:
    """Every Q2 stream of the full-game workflow."""
    return ["ACTIVEBALL", "BALLHITS", *(f"BP_{p}" for p in PLAYERS), *(f"BP_{w}_{t}" for w in WINDOWS for t in TEAMS)]


@dataclass
class Q2Result:
    active: Any  # DataFrame: ACTIVEBALL rows with the KEY columns (persisted), or None without ball rows
    hits: list[dict[str, Any]] = field(default_factory=list)  # BALLHITS
    players: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # BP_<player>
    teams: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # BP_<window>_<team>
    periods: int = 0  # active periods


# --- the job --------------------------------------------------------------------------------------

def _ball_events(active: Any) -> Iterator[tuple[int, int, Key, str, bool]]:
    """The ACTIVEBALL rows possession needs: exit rows, each bucket's first and last, the first after each half end."""
    from pyspark.sql import functions as F

    k = F.struct(*KEY, "inside")
    rows = active.groupBy(F.expr(f"ts div {BUCKET_PS}")).agg(
        F.min(k).alias("first"), F.max(k).alias("last"), F.collect_list(F.when(~F.col("inside"), k)).alias("exits"),
        *(F.min(F.when(F.col("ts") > end, k)).alias(f"after{n}") for n, end in enumerate((E1, E2))),
    ).collect()
    picked: dict[Key, bool] = {}
    afters: list[list[Any]] = [[], []]
    for r in rows:
        for row in (r["first"], r["last"], *r["exits"]):
            picked[key_of(row)] = row["inside"]
        for n in range(2):
            if r[f"after{n}"] is not None:
                afters[n].append(r[f"after{n}"])
    for candidates in afters:
        if candidates:
            first = min(candidates, key=key_of)
            picked[key_of(first)] = first["inside"]
    for key, inside in picked.items():
        yield (key[0], 2, key, "ball", inside)


def q2(spark: Any, data_dir: Path, heartbeat_ms: int = HEARTBEAT_MS) -> Q2Result:
    """Compute Q2 of a split folder: ACTIVEBALL as a DataFrame, everything else as tuples."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    events: list[tuple[int, int, Any, str, Any]] = [
        (ts, 0, (rank, n), kind, None)
        for n, (ts, rank, kind) in enumerate(interruption_events(data_dir, data_span(spark, data_dir), heartbeat_ms))
    ]
    result = Q2Result(active=None)
    hits: list[dict[str, Any]] = []
    read = ball_rows(spark, data_dir)
    if read is not None:
        rows, break_reset = read
        runs = ball_runs(rows, break_reset).persist(StorageLevel.MEMORY_AND_DISK)
        periods = active_periods(spark, runs, break_reset)
        result.periods = len(periods)
        table = F.broadcast(spark.createDataFrame(
            [(sid, run, *key, p) for p, (sid, run, key) in enumerate(periods)],
            "sid long, run long, ats long, abpos int, ablk long, arid long, period int",
        ))
        act = F.struct(*(F.col(f"a{c}").alias(c) for c in KEY))
        active = (
            runs.join(table, ["sid", "run"]).withColumn("act", act).where(F.struct(*KEY) >= F.col("act"))
            .persist(StorageLevel.MEMORY_AND_DISK)
        )
        active.count()
        runs.unpersist()
        result.active = active
        hits = ball_hits(spark, data_dir, active)
        events += _ball_events(active)
    events += [(h["ts"], 1, h["_key"], "hit", h["player"]) for h in hits]
    events.sort(key=lambda e: e[:3])
    result.hits = [{f: h[f] for f in HIT_FIELDS} for h in hits]
    result.players, result.teams = possession(events)
    return result
