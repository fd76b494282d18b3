"""Split a full-game CSV into one time-sorted file per sensor, with Spark.

The simulator replays each sensor from its own file, so the 4.6 GB input is
shuffled by sensor id (one partition holds all rows of a sensor), sorted by
timestamp within partitions, and written with one directory per sensor; the
single part file of each directory then becomes ``SENSOR<sid>.csv``. Nothing
row-sized ever reaches the driver. Malformed lines are counted, not fatal.
"""

from __future__ import annotations

import heapq
import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

from pan.offline.spark import get_session, stoppable

log = logging.getLogger(__name__)
N_FIELDS = 13
ROW_PATTERN = f"^-?[0-9]{{1,18}}(,-?[0-9]{{1,18}}){{{N_FIELDS - 1}}}$"
INTERRUPTIONS = "interruptions.csv"
_BLOCK = 1 << 24


def _uri(path: Path) -> str:
    return path.resolve().as_uri()


def _scan(path: Path) -> tuple[int, int | None, int | None]:
    """Row count and first/last ts of a sorted sensor file, read in blocks."""
    rows = 0
    last_byte = b""
    with open(path, "rb") as f:
        head = f.readline()
        f.seek(0)
        for block in iter(lambda: f.read(_BLOCK), b""):
            rows += block.count(b"\n")
            last_byte = block[-1:]
        if head and last_byte != b"\n":
            rows += 1
        size = f.tell()
        f.seek(max(0, size - 4096))
        tail = f.read().rstrip(b"\n").rsplit(b"\n", 1)[-1]
    first = int(head.split(b",", 2)[1]) if head else None
    last = int(tail.split(b",", 2)[1]) if tail else None
    return rows, first, last


def _merge_parts(parts: list[Path], target: Path) -> None:
    """Merge several ts-sorted part files of one sensor (only if Spark ever splits one)."""

    def keyed(p: Path):
        with open(p, "rb") as f:
            for line in f:
                yield int(line.split(b",", 2)[1]), line

    with open(target, "wb") as out:
        for _, line in heapq.merge(*(keyed(p) for p in parts)):
            out.write(line)


def _parse(spark: Any, src: Path) -> Any:
    """Lines of ``src`` with sid, ts and whether the line is 13 integers.

    One regular expression validates a line; only sid and ts are converted.
    That is several times faster than casting all 13 fields.
    """
    from pyspark.sql import functions as F

    line = F.expr("trim(TRAILING '\\r' FROM value)")  # tolerate CRLF line ends
    df = spark.read.text(_uri(src)).select(line.alias("line"))
    ok = F.col("line").rlike(ROW_PATTERN)
    sid = F.when(ok, F.expr("try_cast(get(split(line, ',', 3), 0) as bigint)"))
    ts = F.when(ok, F.expr("try_cast(get(split(line, ',', 3), 1) as bigint)"))
    return df.select("line", sid.alias("sid"), ts.alias("ts"), ok.alias("ok"))


def split(input_path: str | Path, out_dir: str | Path, master: str | None = None,
          driver_memory: str | None = None, partitions: int | None = None) -> dict[str, Any]:
    """Run the split job; returns (and writes) the manifest."""
    started = time.perf_counter()
    src = Path(input_path)
    if not src.exists():
        raise FileNotFoundError(f"input not found: {src}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for stale in [*out.glob("SENSOR*.csv"), out / "manifest.json"]:
        stale.unlink(missing_ok=True)
    staging = out / "_spark_out"
    shutil.rmtree(staging, ignore_errors=True)

    spark = get_session(master, "pan-split", driver_memory)  # first: it says if pyspark is missing
    try:
        with stoppable(spark):
            return _split(spark, src, out, staging, partitions, started)
    except BaseException:  # interrupted, or the disk is full: no half-written split is left to be mistaken for one
        shutil.rmtree(staging, ignore_errors=True)
        for partial in out.glob("SENSOR*.csv"):
            partial.unlink()
        raise


def _split(spark: Any, src: Path, out: Path, staging: Path, partitions: int | None, started: float) -> dict[str, Any]:
    """The job itself: sort by sensor and time into ``staging``, then one ``SENSOR<sid>.csv`` per sensor in ``out``."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    seen = Observation("lines")
    df = _parse(spark, src).observe(
        seen, F.count(F.lit(1)).alias("lines"), F.sum(F.col("ok").cast("long")).alias("valid")
    )
    n_parts = partitions or max(4, spark.sparkContext.defaultParallelism * 2)
    (
        df.filter("ok")
        .repartition(n_parts, "sid")
        .sortWithinPartitions("sid", "ts")
        .select("sid", "line")
        .write.partitionBy("sid")
        .option("compression", "none")
        .text(_uri(staging))
    )
    lines, valid = int(seen.get["lines"]), int(seen.get["valid"] or 0)
    examples: list[str] = []
    if lines > valid:
        examples = [r["line"] for r in _parse(spark, src).where(~F.col("ok")).select("line").limit(5).collect()]

    sensors: dict[str, dict[str, Any]] = {}
    for part_dir in sorted(staging.glob("sid=*"), key=lambda p: int(p.name[4:])):
        sensor = int(part_dir.name[4:])
        parts = sorted(p for p in part_dir.iterdir() if p.name.startswith("part-") and p.stat().st_size > 0)
        target = out / f"SENSOR{sensor}.csv"
        if len(parts) == 1:
            parts[0].replace(target)
        else:
            _merge_parts(parts, target)
        rows, first, last = _scan(target)
        sensors[str(sensor)] = {"file": target.name, "rows": rows, "first_ts": first, "last_ts": last}
    shutil.rmtree(staging, ignore_errors=True)

    copied = None
    interruptions = src.parent / INTERRUPTIONS
    if interruptions.is_file():
        shutil.copyfile(interruptions, out / INTERRUPTIONS)
        copied = INTERRUPTIONS
    manifest: dict[str, Any] = {
        "input": str(src.resolve()),
        "lines": lines,
        "rows": sum(s["rows"] for s in sensors.values()),
        "rejected": lines - valid,
        "rejected_examples": examples,
        "sensors": sensors,
        "interruptions": copied,
        "master": spark.sparkContext.master,
        "seconds": round(time.perf_counter() - started, 3),
    }
    if manifest["rows"] != valid:
        log.warning("wrote %d rows but %d lines were valid", manifest["rows"], valid)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
