"""The workflows and data of `pan bench replay`: the one-worker-per-peer variant, who hosts what, event time."""

from __future__ import annotations

import json
from pathlib import Path

PS = 10**12


def one_worker_per_peer(source: Path, out: Path) -> Path:
    """``source`` with every worker on its own peer (named after the worker), written to ``out``."""
    data = json.loads(Path(source).read_text())
    data["workers"] = [{**worker, "peer": worker["name"]} for worker in data["workers"]]
    out.write_text(json.dumps(data))
    return out


def workers_by_peer(workflow: Path) -> dict[str, list[str]]:
    """Peer -> names of the workers it hosts, in workflow order."""
    from pan.workflow.parser import load_workflow

    return {peer: [w.name for w in specs] for peer, specs in load_workflow(workflow).peers().items()}


def event_time_s(data: Path) -> float:
    """Event-time span of a split folder (first to last sensor row), in seconds."""
    from simulator.sources import first_ts, last_ts, sensor_files

    files = sensor_files(data)
    first, last = first_ts(data, files), last_ts(data, files)
    return (last - first) / PS if first is not None and last is not None else float("nan")
