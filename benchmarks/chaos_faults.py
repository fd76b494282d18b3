"""Applying the faults of `pan bench chaos` to a running cluster, each followed by every process's /health."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
import time
from typing import Any

from benchmarks.chaos_cluster import Cluster
from benchmarks.chaos_schedule import Fault


async def apply_fault(fault: Fault, cluster: Cluster, t0: float) -> dict[str, Any]:
    """Do ``fault`` now; what happened, times in seconds after ``t0`` (the feed's start).

    A fault ends at SIGCONT (pause), when the replacement answers /health
    (restart: ``restart_s`` is SIGKILL to that moment) or when the connections
    are cut (drop). Then every process's /health latency is measured.
    """
    record: dict[str, Any] = {**fault.as_dict(), "started_s": round(time.monotonic() - t0, 3)}
    if fault.kind == "stall":
        pid = cluster.outside[fault.target]
        os.kill(pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(fault.duration_s)
        finally:
            os.kill(pid, signal.SIGCONT)
        ended = time.monotonic()
        record["ended_s"] = round(ended - t0, 3)
        record["health_s"] = await cluster.health_all(ended)
        return record
    proc = cluster.procs[fault.target]
    if fault.kind == "pause":
        proc.signal(signal.SIGSTOP)
        try:
            await asyncio.sleep(fault.duration_s)
        finally:
            proc.signal(signal.SIGCONT)
    elif fault.kind == "restart":
        killed = time.monotonic()
        await proc.kill()
        await asyncio.sleep(fault.duration_s)
        await proc.start()
        try:
            await cluster.wait_up(fault.target)
            record["restart_s"] = round(time.monotonic() - killed, 3)
        except RuntimeError as exc:  # never back: its /health below says so, and the run goes on
            record["restart_s"], record["error"] = None, str(exc)
    elif fault.kind == "drop":
        record["connections_dropped"] = await drop_connections([port for _, port in proc.endpoints])
    else:
        raise ValueError(f"unknown fault kind {fault.kind!r}")
    ended = time.monotonic()
    record["ended_s"] = round(ended - t0, 3)
    record["health_s"] = await cluster.health_all(ended)
    return record


async def drop_connections(ports: list[int]) -> int:
    """Abort every established TCP connection from or to ``ports`` (both ends on loopback); how many sockets."""
    expression = " or ".join(f"sport = :{p} or dport = :{p}" for p in ports)
    process = await asyncio.create_subprocess_exec(
        "ss", "-K", "-t", "-n", "-H", "state", "established", f"( {expression} )",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, _ = await process.communicate()
    return sum(1 for line in out.decode().splitlines() if line.strip())


async def run_schedule(faults: list[Fault], cluster: Cluster, t0: float) -> list[dict[str, Any]]:
    """Apply ``faults`` one after the other, each at its planned time or when the previous one is over."""
    done = []
    for fault in faults:
        await asyncio.sleep(max(0.0, t0 + fault.at_s - time.monotonic()))
        record = await apply_fault(fault, cluster, t0)
        done.append(record)
        print(f"chaos: {record['kind']} {record['target']} at {record['started_s']:.1f} s "
              f"({record['duration_s']:.2f} s): /health after {max_health(record)} s", file=sys.stderr, flush=True)
    return done


def max_health(record: dict[str, Any]) -> float | None:
    values = list(record["health_s"].values())
    return None if any(v is None for v in values) else max(values)


def drop_supported() -> bool:
    """Dropping connections uses `ss -K` (socket destroy), which needs root and the ss tool."""
    return os.geteuid() == 0 and shutil.which("ss") is not None
