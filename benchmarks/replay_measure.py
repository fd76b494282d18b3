"""Measurements of `pan bench replay`: one replay's figures, the fixed cost of a replay, medians over runs."""

from __future__ import annotations

import hashlib
import shutil
import statistics
from pathlib import Path
from typing import Any

from benchmarks import pyspy, wires
from benchmarks.replay_cpu import KINDS, replay_with_cpu
from benchmarks.replay_workflows import workers_by_peer
from pan.util import eventloop

TARGET_ROWS_PER_S = 150_000  # issue 5: 10x real time on the 2-core machine
#: Where a peer's time goes: (frame that roots the work, what it is), summed over the samples containing it.
PROFILE_AREAS = (
    ("IngestServer._handle", "TCP ingest of sensor rows (forwarders)"),
    ("InputChannel.pull", "pulling inputs (HTTP client or in-process fetch, JSON decoding)"),
    ("RequestHandler._handle_request", "serving HTTP requests (/data pages to other peers and the recorder)"),
    ("OrderedComponent.run", "ordering units and query components"),
    ("EpollSelector.select", "waiting in the event loop (idle)"),
)


def measure(workflow: Path, data: Path, work: Path, span_s: float, wire: str, profile_s: float = 0.0,
            decode: bool = False, to_ts: int | None = None) -> dict[str, Any]:
    """One replay of ``workflow`` over ``wire``: throughput, multiple of real time, CPU per process (and a
    profile), the load average before and after, and a digest of what it recorded (the recording is removed).
    ``decode``: the recorder decodes every tuple; ``to_ts``: feed only the rows up to it."""
    work.mkdir(parents=True, exist_ok=True)
    load_before = wires.load_avg()
    summary, cpu, wall_s, profile = eventloop.run(replay_with_cpu(workflow, data, work, wire, profile_s, decode,
                                                                  to_ts))
    load_after = wires.load_avg()
    digest = recording_digest(work / "record")
    shutil.rmtree(work / "record", ignore_errors=True)  # a 1-minute match records hundreds of MB
    hosted = workers_by_peer(workflow)
    order = [*KINDS.values(), *(("peer", p) for p in hosted)]
    processes = [{"process": name, "kind": kind, "workers": hosted.get(name, []) if kind == "peer" else [],
                  "cpu_s": round(cpu.get((kind, name), 0.0), 2)}
                 for kind, name in order + sorted(set(cpu) - set(order))]
    feed_s, recorded_s = summary["feed_s"], summary["recorded_s"]
    rows_per_s = summary["sent"] / feed_s if feed_s > 0 else float("nan")
    # what a user waits for: from the first row fed until every output was recorded (nothing left in flight)
    end_to_end = summary["sent"] / recorded_s if recorded_s > 0 else float("nan")
    return {
        "wire": wire,
        "load_avg_before": load_before,
        "load_avg_after": load_after,
        "recording_sha256": digest,
        "peers": len(hosted),
        "input_rows": summary["sent"],
        "event_time_s": round(span_s, 3),
        "feed_s": feed_s,
        "elapsed_s": summary["elapsed_s"],
        "wall_s": round(wall_s, 3),
        "rows_per_s": round(rows_per_s, 1),
        "recorded_s": recorded_s,
        "end_to_end_rows_per_s": round(end_to_end, 1),
        "real_time_multiple": round(span_s / feed_s, 3) if feed_s > 0 else None,
        "target_rows_per_s": TARGET_ROWS_PER_S,
        "target_met": end_to_end >= TARGET_ROWS_PER_S,  # a feed that runs ahead of the workflow meets nothing
        "tuples_recorded": summary["tuples"],
        "missed": summary["missed"],
        "cpu_total_s": round(sum(cpu.values()), 2),
        "processes": processes,
        "profile": None if profile is None else profile_summary(profile, profile_s),
    }


def profile_summary(profile: pyspy.Profile, seconds: float) -> dict[str, Any]:
    """Shares of the peers' samples: by area of work and by function (self time)."""
    return {
        "seconds": seconds,
        "rate_hz": pyspy.RATE_HZ,
        "samples": profile.samples,
        "areas": [{"frame": frame, "what": what, "share": round(profile.share_of(frame), 4)}
                  for frame, what in PROFILE_AREAS],
        "self": [{"function": name, "share": round(share, 4)} for name, share in profile.share(profile.self_time, 15)],
    }


def recording_digest(record: Path) -> str:
    """sha256 over every recorded stream (name and bytes, in name order): equal digests = identical outputs."""
    digest = hashlib.sha256()
    for path in sorted(record.glob("*.jsonl")):
        digest.update(path.name.encode() + b"\0")
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def fixed_cost(workflow: Path, data: Path, work: Path, wire: str, reps: int) -> dict[str, Any]:
    """CPU of the replay without a row: every process starts, the recorder subscribes to every output, every
    input ends at once and the ends reach the recorder, everything stops. What a replay costs whatever its
    length; the rest of a measured run's CPU is the rows' (``per_row_cpu``)."""
    from simulator.sources import first_ts, sensor_files

    before_any = (first_ts(data, sensor_files(data)) or 0) - 1
    runs = []
    for rep in range(reps):
        result = measure(workflow, data, work / f"{wire}-empty-{rep}", 0.0, wire, to_ts=before_any)
        if result["input_rows"]:
            raise RuntimeError(f"the replay without rows fed {result['input_rows']} rows")
        runs.append(result)
    return {"runs": len(runs), "cpu_total_s": wires.spread([r["cpu_total_s"] for r in runs]),
            "driver_cpu_s": wires.spread([_driver_cpu(r) for r in runs])}


def per_row_cpu(summary: dict[str, Any], fixed: dict[str, Any]) -> dict[str, float]:
    """The medians of a wire's runs less the fixed cost: the CPU the rows took, and the driver's share of it."""
    total = summary["cpu_total_s_median"] - fixed["cpu_total_s"]["median"]
    driver = summary["driver_cpu_s"]["median"] - fixed["driver_cpu_s"]["median"]
    return {"cpu_total_s": round(total, 2), "driver_cpu_s": round(driver, 2),
            "driver_share": round(driver / total, 3) if total > 0 else float("nan")}


def _driver_cpu(run: dict[str, Any]) -> float:
    return next((p["cpu_s"] for p in run["processes"] if p["kind"] == "driver"), 0.0)


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The repetitions of one layout and wire: medians with min-max, CPU per process as medians."""
    first = runs[0]
    processes = [{**p, "cpu_s": round(statistics.median(
        next((q["cpu_s"] for q in r["processes"] if q["process"] == p["process"]), 0.0) for r in runs), 2)}
        for p in first["processes"]]
    spreads = {key: wires.spread([r[key] for r in runs])
               for key in ("rows_per_s", "end_to_end_rows_per_s", "real_time_multiple", "feed_s", "wall_s",
                           "cpu_total_s")}
    driver = wires.spread([_driver_cpu(r) for r in runs])
    return {
        "peers": first["peers"], "input_rows": first["input_rows"], "event_time_s": first["event_time_s"],
        "reps": len(runs), **spreads, "driver_cpu_s": driver,
        "rows_per_s_median": spreads["rows_per_s"]["median"], "cpu_total_s_median": spreads["cpu_total_s"]["median"],
        "end_to_end_rows_per_s_median": spreads["end_to_end_rows_per_s"]["median"],
        "target_met": spreads["end_to_end_rows_per_s"]["median"] >= TARGET_ROWS_PER_S,
        "tuples_recorded": sorted({r["tuples_recorded"] for r in runs}),
        "missed_runs": sum(bool(r["missed"]) for r in runs),
        "processes": processes,
        "runs": [{k: v for k, v in r.items() if k not in ("processes", "profile")} for r in runs],
    }
