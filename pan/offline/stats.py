"""`pan stats delays`: per-stream delay profiles from recorded arrival logs (Spark).

An ordering unit starts with K = 0 and learns K from the delays it measures,
so the first window of a run produces late events.  Components that ran with
``"arrival_log": PATH`` recorded, per batch, when each event reached their
ordering unit (``arrival_ns,stream,ts``, one CSV per component, rows in
arrival order).  This job replays those logs the way the unit measures delays
and writes a profile that ``pan.ordering.settings.load_profile`` /
``OrderingSettings.from_profile`` turn into an initial K (seed 001,
"iterative delay calculation").

Delays are relative to the unit's clock, exactly as the unit measures them:

- clk is the running maximum of ``ts`` over the clock streams of that file
  (``--clock``, default every stream in the file), over the rows that arrived
  up to and including the row, in (arrival_ns, line) order;
- a clock-stream event's delay is ``clk - ts`` (0 for the event that moves clk);
- a non-clock event is measured when the *next* clock event arrives, against
  the clk that event sets (the unit keeps such events pending until then);
  a non-clock event after the last clock event is never measured by the unit
  and is counted as ``unmeasured`` here too.

Absolute delays (arrival minus ts) cannot be computed: arrival is wall time
and ts lives on the sources' time base.  Percentiles are exact (Spark's
``percentile``, linear interpolation), the standard deviation is the
population one, as in the unit.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

HEADER = "arrival_ns,stream,ts"
#: A file is never split into several Spark partitions, so row ids follow line order.
_ONE_SPLIT_PER_FILE = str(1 << 62)


class StatsError(Exception):
    """The job cannot run on this input (no logs, nothing parsable)."""


@dataclass
class LogInput:
    """The arrival logs found under LOG_DIR."""

    root: Path
    files: list[Path] = field(default_factory=list)


def find_logs(log_dir: str | Path) -> LogInput:
    """``LOG_DIR/*.csv`` (or a single file); StatsError when there is nothing to read."""
    root = Path(log_dir)
    if root.is_file():
        return LogInput(root.parent, [root])
    if not root.is_dir():
        raise StatsError(f"{root}: no such directory")
    files = sorted(p for p in root.glob("*.csv") if p.is_file())
    if not files:
        raise StatsError(f"{root}: no arrival logs (*.csv) found")
    return LogInput(root, files)


def read_lines(spark: SparkSession, logs: LogInput) -> DataFrame:
    """Rows (file, line, text): ``line`` increases with the position in the file.

    ``monotonically_increasing_id`` follows the read order inside a partition.
    With the split size raised above any file size each file is read by exactly
    one task from start to end, so that order is the file's line order (several
    small files may share a task; they are then read one after the other).
    """
    from pyspark.sql import functions as F

    conf = spark.conf
    old = conf.get("spark.sql.files.maxPartitionBytes")
    conf.set("spark.sql.files.maxPartitionBytes", _ONE_SPLIT_PER_FILE)
    try:
        df = (
            spark.read.text([str(p) for p in logs.files])
            .select(
                F.element_at(F.split(F.col("_metadata.file_path"), "/"), -1).alias("file"),
                F.monotonically_increasing_id().alias("line"),
                F.col("value").alias("text"),
            )
            .localCheckpoint(eager=True)  # ids fixed now, before any conf change or shuffle
        )
    finally:
        conf.set("spark.sql.files.maxPartitionBytes", old)
    return df


def parse(lines: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(valid rows: file, line, arrival_ns, stream, ts; malformed lines: file, line, text)."""
    from pyspark.sql import functions as F

    text = F.rtrim(F.col("text"))
    parts = F.split(text, ",")
    body = lines.where((text != "") & (text != HEADER))
    parsed = body.select(
        "file", "line", "text",
        F.when(F.size(parts) == 3, parts[0].try_cast("bigint")).alias("arrival_ns"),
        F.when(F.size(parts) == 3, F.trim(parts[1])).alias("stream"),
        F.when(F.size(parts) == 3, parts[2].try_cast("bigint")).alias("ts"),
    )
    ok = F.col("arrival_ns").isNotNull() & F.col("ts").isNotNull() & (F.coalesce(F.col("stream"), F.lit("")) != "")
    valid = parsed.where(ok).select("file", "line", "arrival_ns", "stream", "ts")
    bad = parsed.where(~ok).select("file", "line", "text")
    return valid, bad


def clock_assignment(valid: DataFrame, clock: list[str] | None) -> tuple[DataFrame, dict[str, list[str]]]:
    """Mark clock rows: ``clock`` streams, or every stream of a file that has none of them."""
    from pyspark.sql import functions as F

    per_file = {r["file"]: sorted(r["streams"]) for r in
                valid.groupBy("file").agg(F.collect_set("stream").alias("streams")).collect()}
    clocks: dict[str, list[str]] = {}
    for name, streams in per_file.items():
        chosen = [s for s in streams if clock is None or s in clock]
        if not chosen:
            log.warning("%s: none of the clock streams %s; using all its streams as clock", name, clock)
            chosen = streams
        clocks[name] = chosen
    if clock is None:
        return valid.withColumn("is_clock", F.lit(True)), clocks
    all_clock_files = [f for f, streams in per_file.items() if not set(streams) & set(clock)]
    is_clock = F.col("stream").isin(list(clock)) | F.col("file").isin(all_clock_files)
    return valid.withColumn("is_clock", is_clock), clocks


def delays(rows: DataFrame) -> DataFrame:
    """Each row's delay as its ordering unit measures it (null when never measured)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    order = Window.partitionBy("file").orderBy("arrival_ns", "line")
    upto = order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    after = order.rowsBetween(Window.currentRow, Window.unboundedFollowing)
    with_clk = rows.withColumn("clk", F.max(F.when(F.col("is_clock"), F.col("ts"))).over(upto))
    # clk as set by the next clock row: the moment the unit measures a pending non-clock event.
    next_clk = F.first(F.when(F.col("is_clock"), F.col("clk")), ignorenulls=True).over(after)
    ref = F.when(F.col("is_clock"), F.col("clk")).otherwise(next_clk)
    # greatest() skips nulls, so keep "never measured" null explicitly.
    return with_clk.withColumn("delay_ps", F.when(ref.isNotNull(), F.greatest(ref - F.col("ts"), F.lit(0))))


def profile_rows(measured: DataFrame) -> list[dict[str, Any]]:
    """Per-stream statistics over all files."""
    from pyspark.sql import functions as F

    d = F.col("delay_ps")
    agg = measured.groupBy("stream").agg(
        F.count(F.lit(1)).alias("events"),
        F.count(d).alias("count"),
        F.mean(d).alias("mean_ps"),
        F.stddev_pop(d).alias("std_ps"),
        F.min(d).alias("min_ps"),
        F.percentile(d, [0.5, 0.99]).alias("pct"),
        F.max(d).alias("max_ps"),
        F.min("arrival_ns").alias("first_arrival_ns"),
        F.max("arrival_ns").alias("last_arrival_ns"),
        F.min("ts").alias("first_ts"),
        F.max("ts").alias("last_ts"),
        F.countDistinct("file").alias("files"),
    )
    return [r.asDict() for r in agg.orderBy("stream").collect()]


def _stream_entry(r: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {"events": r["events"], "count": r["count"], "unmeasured": r["events"] - r["count"]}
    if r["count"]:
        p50, p99 = r["pct"]
        entry.update(
            mean_ps=float(r["mean_ps"]), std_ps=float(r["std_ps"]), min_ps=int(r["min_ps"]),
            p50_ps=float(p50), p99_ps=float(p99), max_ps=int(r["max_ps"]),
        )
    span_s = (r["last_arrival_ns"] - r["first_arrival_ns"]) / 1e9
    entry.update(
        first_arrival_ns=r["first_arrival_ns"], last_arrival_ns=r["last_arrival_ns"],
        arrival_rate_hz=(r["events"] - 1) / span_s if span_s > 0 else None,
        first_ts=r["first_ts"], last_ts=r["last_ts"], files=r["files"],
    )
    return entry


def delay_profile(spark: SparkSession, log_dir: str | Path, clock: list[str] | None = None) -> dict[str, Any]:
    """The profile for the arrival logs under ``log_dir`` (see the module doc)."""
    from pyspark.sql import functions as F

    logs = find_logs(log_dir)
    lines = read_lines(spark, logs)
    valid, bad = parse(lines)
    malformed = {r["file"]: r["n"] for r in bad.groupBy("file").agg(F.count(F.lit(1)).alias("n")).collect()}
    examples = [f"{r['file']}: {r['text'][:120]!r}" for r in bad.orderBy("file", "line").limit(5).collect()]
    rows = valid.persist()
    try:
        if rows.limit(1).count() == 0:
            raise StatsError(f"{logs.root}: no valid arrival rows in {len(logs.files)} file(s)"
                             f" ({sum(malformed.values())} malformed lines)")
        marked, clocks = clock_assignment(rows, clock)
        per_stream = profile_rows(delays(marked))
    finally:
        rows.unpersist()
    streams = {r["stream"]: _stream_entry(r) for r in per_stream}
    return {
        "streams": {name: e for name, e in streams.items() if e["count"]},
        "unmeasured_streams": {name: e for name, e in streams.items() if not e["count"]},
        "source": {
            "log_dir": str(logs.root),
            "files": {p.name: {"clock": clocks.get(p.name, []), "malformed": malformed.get(p.name, 0)}
                      for p in logs.files},
            "clock": clock,
            "malformed": sum(malformed.values()),
            "malformed_examples": examples,
            "delay": "clk - ts per ordering unit (clock streams: running max ts; others: at next clock event)",
            "percentiles": "exact (linear interpolation)",
            "std": "population",
        },
        "generated": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
