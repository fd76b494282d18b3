"""Batch reference for Q2 (ball possession): ACTIVEBALL, BALLHITS, BP_<player>, BP_<window>_<team>.

Written from the rules in DESIGN §6 and the docstrings of the streaming
components (workers/ball.py, hits.py, possession.py), without importing them.
Every component sees its inputs in (ts, input position) order, so the batch
job orders rows the same way: ball rows by ``(ts, position of the ball in
debs.BALLS, file order)``, and at equal ts INTERRUPTIONS before BALLHITS before
ACTIVEBALL (possession), player sensors before ACTIVEBALL (hits).

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

**Ball hits** (Spark). Take the ACTIVEBALL rows with ``a >= 55 m/s²`` in
stream order; a spike starts at such a row unless the previous one is of the
same ball and less than 10 ms earlier (rows under the threshold in between do
not matter). For every spike row, each player
sensor's latest row at or before it (equal ts counts) is looked up with an
as-of window over only the player rows near spikes; the row must be at most
250 ms old and within 1 m (3-D). The nearest sensor's player is the hitter; a
tie goes to the sensor the detector saw first (earliest first row, then input
order). A spike's hit is its first row that has a hitter.

**Possession** (driver, sequential). Who holds the ball is a state machine over
time-ordered events, so it runs in the driver over a reduced event list: every
INTERRUPTIONS event, every hit, and of ACTIVEBALL only the rows that can matter
(exit rows, the first and the last row of every 20 ms bucket, the first row
after each half end). The rows left out are inside the pitch, neither first
nor last of their bucket, and not the first event after a half end: they
change nothing and emit nothing. The ball is *heard* up to the latest
ACTIVEBALL row or hit; the last row of each bucket keeps that exact wherever
it matters (at a bucket's first event, and across a silence, which is longer
than a bucket). Per event: a possession whose half ended, or whose ball has
been silent for more than ``SILENCE_PS`` (1 s), before the event ends,
whichever came first: at the half's end, credited up to it, or at the last
heard row + 1 s, credited up to the last heard row; a counted hit (not while
interrupted) by a new player ends the holder's possession and starts the
hitter's (a repeated hit is a dribble); an exit row or an interruption
``begin`` ends it at its ts. A running possession counts up to the last heard
row (never past the half's end). A player's tuple is emitted when a possession
ends (at the moment it ends), at each counted hit, and at the first event of
each bucket for the holder unless the holder already emitted in that bucket.
The team windows are evaluated at the first event of each bucket, vectorised
(prefix sums over the closed intervals), over game time (the clock stands
still outside the halves, so a window reaches back over the break), and a
team's tuple is emitted when its ``(time_ps, time_percent)`` differs from the
previous bucket's.

INTERRUPTIONS is what `pan simulate` feeds: ``begin``/``end`` from
``interruptions.csv`` (an ``end`` before a ``begin`` at equal ts) plus a
``heartbeat`` every ``heartbeat_ms`` of event time over the data's span (its
first to last row, from ``manifest.json`` when there is one); no stream at all
without ``interruptions.csv``. Heartbeats are events too, so they open buckets.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from workers.debs import (
    BALLS,
    BALLS_FIRST_HALF,
    BALLS_SECOND_HALF,
    FIRST_HALF,
    PLAYER_SENSORS,
    PLAYERS,
    PS_PER_MS,
    SECOND_HALF,
    TEAMS,
    WINDOWS,
    X_MAX,
    X_MIN,
    Y_MAX,
    Y_MIN,
)
from workers.reference_players import ROW_FIELDS, read_rows

S1, E1 = FIRST_HALF
S2, E2 = SECOND_HALF
THRESHOLD = 55_000_000  # µm/s² (55 m/s²)
RADIUS_MM = 1000
STALE_PS = 250 * PS_PER_MS
REARM_PS = 10 * PS_PER_MS  # a spike's rows over the threshold are less than this apart
BUCKET_PS = 20 * PS_PER_MS
HEARTBEAT_MS = 10  # as `pan simulate` feeds (simulator.simulate.HEARTBEAT_PS); a test checks they agree
NO_END = 1 << 62
SILENCE_PS = PS_PER_MS * 1000  # a possession ends after this long without active-ball data
#: The hit detector's player inputs, in input order (ties in "seen first" go by this order).
HIT_SENSORS = [sid for sids in PLAYER_SENSORS.values() for sid in sids]
SENSOR_PLAYER = {sid: p for p, sids in PLAYER_SENSORS.items() for sid in sids}
KEY = ("ts", "bpos", "blk", "rid")  # total order of ball rows
AB_FIELDS = ROW_FIELDS[1:2] + ROW_FIELDS[:1] + ROW_FIELDS[2:]  # ts, sid, x, …, az
HIT_FIELDS = ("ts", "player", "sid", "x", "y", "z", "a")
BP_FIELDS = ("ts", "player", "time_ps", "hits")
TEAM_FIELDS = ("ts", "team", "time_ps", "time_percent")
SENSOR_FILE = re.compile(r"SENSOR(\d+)\.csv")

Key = tuple[int, int, int, int]


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


def half_end(ts: int) -> int:
    for start, end in (FIRST_HALF, SECOND_HALF):
        if start <= ts <= end:
            return end
    return NO_END


def _key(row: Any) -> Key:
    return (row["ts"], row["bpos"], row["blk"], row["rid"])


# --- INTERRUPTIONS --------------------------------------------------------------------------------

def interruption_events(data_dir: Path, span: tuple[int, int] | None, heartbeat_ms: int) -> list[tuple[int, int, str]]:
    """(ts, rank, event) in stream order: ``end`` (0) before ``begin`` (1) before ``heartbeat`` (2) at equal ts."""
    path = data_dir / "interruptions.csv"
    if not path.is_file():
        return []
    events: list[tuple[int, int, str]] = []
    if span is not None and heartbeat_ms > 0:
        period = heartbeat_ms * PS_PER_MS
        first, last = span
        events += [(ts, 2, "heartbeat") for ts in range(first - first % period + period, last + 1, period)]
    for number, raw in enumerate(path.read_text().splitlines()):
        parts = raw.strip().split(",")
        if not raw.strip() or (number == 0 and not parts[0].lstrip("-").isdigit()):
            continue  # header or blank line
        try:
            start, end = int(parts[0]), int(parts[1])
        except (ValueError, IndexError):
            raise ValueError(f"{path}: line {number + 1}: expected start_ts,end_ts, got {raw!r}") from None
        events += [(start, 1, "begin"), (end, 0, "end")]
    events.sort(key=lambda e: (e[0], e[1]))
    return events


def data_span(spark: Any, data_dir: Path) -> tuple[int, int] | None:
    """First and last ts of the folder's sensor rows: the manifest's, else read from every SENSOR<sid>.csv."""
    manifest = data_dir / "manifest.json"
    if manifest.is_file():
        try:
            sensors = json.loads(manifest.read_text()).get("sensors", {})
            firsts = [s["first_ts"] for s in sensors.values() if isinstance(s.get("first_ts"), int)]
            lasts = [s["last_ts"] for s in sensors.values() if isinstance(s.get("last_ts"), int)]
            if firsts and lasts:
                return min(firsts), max(lasts)
        except (ValueError, AttributeError, TypeError, KeyError):
            pass
    files = sorted(str(p) for p in data_dir.iterdir() if SENSOR_FILE.fullmatch(p.name))
    if not files:
        return None
    from pyspark.sql import functions as F

    ts = spark.read.csv(files, schema="sid long, ts long")
    row = ts.agg(F.min("ts").alias("lo"), F.max("ts").alias("hi")).first()
    return None if row is None or row["lo"] is None else (row["lo"], row["hi"])


# --- active ball ----------------------------------------------------------------------------------

def _ball_rows(spark: Any, data_dir: Path) -> tuple[Any, bool] | None:
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


def _runs(rows: Any, break_reset: bool) -> Any:
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
    return {(_key(r["k"]), r["sid"]): (_key(r["next"]["k"]), r["next"]["run"])
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
            return _key(r["end"])
        return break_marker if break_reset and r["half"] == 1 else None

    markers = sorted({m for r in table if (m := release(r)) is not None})
    after = _next_inside(spark, runs, markers)
    periods: list[tuple[int, int, Key]] = []
    act = min(((_key(r["start"]), r["sid"], r["run"]) for r in table), default=None)
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
    rows.sort(key=lambda r: _key(r["ck"]))
    return [{**{f: r[f] for f in HIT_FIELDS}, "_key": _key(r["ck"])} for r in rows]


# --- possession -----------------------------------------------------------------------------------

class _Possession:
    """The possession state machine, fed events in input order; collects the outputs."""

    def __init__(self) -> None:
        self.holder: str | None = None
        self.since, self.until, self.interrupted = 0, NO_END, False
        self.heard = 0  # ts of the latest ball row or hit
        self.hits = dict.fromkeys(PLAYERS, 0)
        self.held = dict.fromkeys(PLAYERS, 0)  # time of the holder's finished possessions
        self.intervals: list[list[tuple[int, int]]] = [[] for _ in TEAMS]  # finished, per team, in time order
        self.out: dict[str, list[dict[str, Any]]] = {p: [] for p in PLAYERS}
        self.last_bucket: dict[str, int | None] = dict.fromkeys(PLAYERS)
        self.bucket: int | None = None
        # One entry per bucket (its first event): state after the event, for the team windows.
        self.ticks: dict[str, list[int]] = {k: [] for k in ("ts", "team", "since", "upto", *TEAMS)}

    def end(self, credit: int, at: int, ended: list[tuple[str, int]]) -> None:
        holder = self.holder
        assert holder is not None
        end = max(credit, self.since)
        self.held[holder] += end - self.since
        self.intervals[TEAMS.index(holder[0])].append((self.since, end))
        ended.append((holder, at))
        self.holder = None

    def emit(self, player: str, ts: int) -> None:
        time_ps = self.held[player]
        if player == self.holder:
            time_ps += max(0, min(ts, self.until, self.heard) - self.since)
        self.last_bucket[player] = ts // BUCKET_PS
        self.out[player].append({"ts": ts, "player": player, "time_ps": time_ps, "hits": self.hits[player]})

    def step(self, ts: int, kind: str, value: Any) -> None:
        ended: list[tuple[str, int]] = []
        if self.holder is not None:
            silent = self.heard + SILENCE_PS
            if ts > self.until and self.until <= silent:
                self.end(self.until, self.until, ended)
            elif ts > silent:
                self.end(self.heard, silent, ended)
        hitter = None
        if kind == "hit":
            if not self.interrupted:
                self.heard = max(self.heard, ts)
                self.hits[value] += 1
                hitter = value
                if value != self.holder:
                    if self.holder is not None:
                        self.end(ts, ts, ended)
                    self.holder, self.since, self.until = value, ts, half_end(ts)
        elif kind == "begin":
            if self.holder is not None:
                self.end(ts, ts, ended)
            self.interrupted = True
        elif kind == "end":
            self.interrupted = False
        elif kind == "ball":
            self.heard = max(self.heard, ts)
            if not value and self.holder is not None:
                self.end(ts, ts, ended)  # the exit row
        for player, at in ended:
            self.emit(player, at)
        if hitter is not None:
            self.emit(hitter, ts)
        bucket = ts // BUCKET_PS
        if bucket != self.bucket:
            self.bucket = bucket
            holder = self.holder
            if holder is not None and self.last_bucket[holder] != bucket:
                self.emit(holder, ts)
            tick = self.ticks
            tick["ts"].append(ts)
            tick["team"].append(TEAMS.index(holder[0]) if holder is not None else -1)
            tick["since"].append(self.since)
            tick["upto"].append(min(self.until, self.heard))
            for n, team in enumerate(TEAMS):
                tick[team].append(len(self.intervals[n]))


def possession(events: list[tuple[int, int, Any, str, Any]]
               ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """BP_<player> and BP_<window>_<team> from (ts, input, order, kind, value) events sorted by their first three.

    kind: ``begin``/``end``/``heartbeat`` (input 0), ``hit`` with the player (1), ``ball`` with inside (2).
    """
    state = _Possession()
    for ts, _input, _order, kind, value in events:
        state.step(ts, kind, value)
    return {f"BP_{p}": state.out[p] for p in PLAYERS}, team_windows(state.ticks, state.intervals)


def game_elapsed(ts: np.ndarray) -> np.ndarray:
    """Play elapsed at each ts (ps): the two halves' parts before it; the clock stands still outside play."""
    return np.clip(ts - S1, 0, E1 - S1) + np.clip(ts - S2, 0, E2 - S2)


def team_windows(ticks: dict[str, list[int]], intervals: list[list[tuple[int, int]]]
                 ) -> dict[str, list[dict[str, Any]]]:
    """BP_<window>_<team>: each team's possession time in the window at every tick, emitted when it changes.

    The sliding windows measure game time: every instant is mapped to the play
    elapsed by then (``game_elapsed``), and a window at ``ts`` is the last W of
    that. Closed intervals of a team are disjoint and in time order, so the time
    within ``[lo, g]`` of the first K of them is a prefix-sum difference, minus the
    part of the first interval ending after ``lo`` that lies before ``lo``.
    """
    ts, team, since, upto = (np.array(ticks[k], dtype=np.int64) for k in ("ts", "team", "since", "upto"))
    held_to = np.minimum(ts, upto)
    streams: dict[str, list[dict[str, Any]]] = {}
    for window, length in WINDOWS.items():
        totals = []
        for t in range(len(TEAMS)):
            iv = np.array(intervals[t], dtype=np.int64).reshape(-1, 2)
            count = np.array(ticks[TEAMS[t]], dtype=np.int64)
            if length is None:
                starts, ends = iv[:, 0], iv[:, 1]
                closed = np.concatenate(([0], np.cumsum(ends - starts)))[count]
                current = np.maximum(0, held_to - since)
            else:
                starts, ends = game_elapsed(iv[:, 0]), game_elapsed(iv[:, 1])
                prefix = np.concatenate(([0], np.cumsum(ends - starts)))
                lo = game_elapsed(ts) - length
                first = np.searchsorted(ends, lo, side="right")  # first interval ending after lo
                clip = np.maximum(0, lo - np.append(starts, 0)[first])
                closed = np.where(first < count, prefix[count] - prefix[np.minimum(first, count)] - clip, 0)
                current = np.maximum(0, game_elapsed(held_to) - np.maximum(game_elapsed(since), lo))
            totals.append(closed + np.where(team == t, current, 0))
        both = totals[0] + totals[1]
        for t, name in enumerate(TEAMS):
            safe = np.where(both > 0, both, 1).astype(np.float64)
            percent = np.where(both > 0, totals[t].astype(np.float64) * 100.0 / safe, 0.0)
            changed = np.ones(len(ts), dtype=bool)
            changed[1:] = (totals[t][1:] != totals[t][:-1]) | (percent[1:] != percent[:-1])
            idx = np.flatnonzero(changed)
            streams[f"BP_{window}_{name}"] = [
                {"ts": a, "team": name, "time_ps": b, "time_percent": c}
                for a, b, c in zip(ts[idx].tolist(), totals[t][idx].tolist(), percent[idx].tolist(), strict=True)
            ]
    return streams


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
            picked[_key(row)] = row["inside"]
        for n in range(2):
            if r[f"after{n}"] is not None:
                afters[n].append(r[f"after{n}"])
    for candidates in afters:
        if candidates:
            first = min(candidates, key=_key)
            picked[_key(first)] = first["inside"]
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
    read = _ball_rows(spark, data_dir)
    if read is not None:
        rows, break_reset = read
        runs = _runs(rows, break_reset).persist(StorageLevel.MEMORY_AND_DISK)
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

