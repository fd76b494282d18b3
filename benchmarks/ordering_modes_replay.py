"""One replay of `pan bench ordering-modes`: a match fed into the workflow while every ordering unit is sampled.

Shared with the acceptance tests (``tests/bench/test_ordering_modes.py``) and `pan bench speculation`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = {"watermark": ROOT / "workflows" / "full_game_3_peers.json",
             "max": ROOT / "workflows" / "full_game_3_peers_max.json"}
IMPAIR = ROOT / "workflows" / "impair_outages.json"
SAMPLE_S = 0.2
#: Counters of a speculative unit sampled beside K and clk (`pan bench speculation`).
SPECULATION_COUNTERS = ("premature", "replays", "replayed_events", "snapshot_bytes_peak", "fallbacks")
DONE_TIMEOUT_S = 600.0
#: What the benchmark records: one result (recording all ~450 streams would load the machine more than the
#: workflow does; late events are counted by the units themselves).
RECORDED = ("BP_wholeGame_A",)


@dataclass
class Run:
    """One replay: samples of every ordered unit, and what the feed reported."""

    mode: str
    origin_ts: int
    samples: dict[str, list[dict[str, Any]]]  # worker -> [{t, clk, k, pushed, late, released, buffered}]
    windows: dict[str, int]  # worker -> its K window (measurements)
    inputs: dict[str, list[str]]  # worker -> input streams
    elapsed_s: float
    feed: dict[str, Any]
    missed: dict[str, int]
    load_start: list[float] = field(default_factory=list)
    load_end: list[float] = field(default_factory=list)

    def final(self, worker: str) -> dict[str, Any]:
        return self.samples[worker][-1] if self.samples[worker] else {}

    def late_fraction(self, worker: str | None = None) -> float:
        """Late events / events pushed, of one unit or of all of them."""
        names = [worker] if worker else list(self.samples)
        late = sum(self.final(n).get("late", 0) for n in names)
        pushed = sum(self.final(n).get("pushed", 0) for n in names)
        return late / pushed if pushed else float("nan")

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "origin_ts": self.origin_ts, "elapsed_s": round(self.elapsed_s, 2),
                "load_start": self.load_start, "load_end": self.load_end, "missed": self.missed,
                "late_fraction": self.late_fraction(),
                "units": {n: {k: self.final(n).get(k) for k in ("k", "pushed", "late", "released")}
                          for n in self.samples}}


def ordered_workers(workflow: Any) -> list[Any]:
    """The workers with an ordering unit (those whose params set a clock mode)."""
    return [spec for spec in workflow.workers if "clock_mode" in spec.params]


async def sample_units(workflow: Any, samples: dict[str, list[dict[str, Any]]], period_s: float = SAMPLE_S) -> None:
    """Append each ordered worker's unit state every ``period_s`` until cancelled.

    An observer of `simulator.replay`."""
    import aiohttp

    specs = ordered_workers(workflow)
    started = time.monotonic()

    async def one(session: aiohttp.ClientSession, spec: Any) -> None:
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError, ValueError):
            async with session.get(f"http://{spec.host}:{spec.port}/streams") as resp:
                body = await resp.json(content_type=None)
            unit = body["component"]["ordering"]
            samples[spec.name].append({
                "t": round(time.monotonic() - started, 3), "clk": unit["clk"], "k": unit["k"],
                "pushed": unit["pushed"], "late": unit["late"], "released": unit["released"],
                "buffered": unit["buffered"], "ended": unit.get("ended_inputs", 0),
                # speculative units only (pan/ordering/speculation.py): 0 for a buffering unit
                **{key: unit.get("speculation", {}).get(key, 0) for key in SPECULATION_COUNTERS},
            })

    timeout = aiohttp.ClientTimeout(total=5)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while True:
            await asyncio.gather(*(one(session, spec) for spec in specs))
            await asyncio.sleep(period_s)


def moved(workflow_path: Path, work: Path, overrides: dict[str, Any] | None = None) -> Path:
    """The workflow on free ports (``overrides`` added to every ordered worker's params), in ``work``."""
    from pan.workflow.parser import on_free_ports

    data = on_free_ports(json.loads(Path(workflow_path).read_text()))
    for worker in data["workers"]:
        if overrides and "clock_mode" in worker.get("params", {}):
            worker["params"] = {**worker["params"], **overrides}
    path = work / f"{Path(workflow_path).stem}-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(data))
    return path


async def replay_sampled(
    workflow_path: Path,
    data: Path,
    record: Path,
    *,
    mode: str,
    impair: Path | None = IMPAIR,
    speedup: float = 1.0,
    send_log: Path | None = None,
    quiet_s: float = 6.0,
    record_all: bool = False,
    skip_halftime: bool = True,
) -> Run:
    """Replay ``data`` into ``workflow_path`` (already on free ports), sampling every ordering unit.

    The feed ends only once every unit has seen the end of all its inputs and
    released everything, so the last sample of each unit is its final state.
    Records ``RECORDED``, or every output. ``skip_halftime`` cuts the break out
    of the replay: in real time it would be 12 minutes without a row.
    """
    from pan.components.catalog import get_component_type
    from pan.ordering.settings import PARAM_KEYS, OrderingSettings
    from pan.workflow.parser import load_workflow
    from simulator.impair import ImpairProfile
    from simulator.replay import replay
    from simulator.simulate import simulate
    from simulator.simulate_options import SimulateOptions
    from simulator.sources import first_ts, sensor_files

    workflow = load_workflow(workflow_path)
    specs = ordered_workers(workflow)
    samples: dict[str, list[dict[str, Any]]] = {spec.name: [] for spec in specs}
    windows, inputs = {}, {}
    for spec in specs:
        component = get_component_type(spec.type)
        assert component is not None
        inputs[spec.name] = list(component.input_names(spec))
        ordering = {k: v for k, v in spec.params.items() if k in PARAM_KEYS}
        windows[spec.name] = OrderingSettings.from_params(ordering, inputs[spec.name]).window
    options = SimulateOptions(workflow=workflow, data_dir=data, speedup=speedup,
                              impair=ImpairProfile.load(impair) if impair else None, send_log=send_log,
                              skip_halftime=skip_halftime)

    async def feed() -> dict[str, Any]:
        summary = (await simulate(options)).as_dict()
        deadline = time.monotonic() + DONE_TIMEOUT_S
        while time.monotonic() < deadline and not all(  # noqa: ASYNC110 (the state is polled over HTTP)
            ss and ss[-1]["ended"] == len(inputs[name]) and ss[-1]["buffered"] == 0 for name, ss in samples.items()
        ):
            await asyncio.sleep(SAMPLE_S)
        return summary

    only = None if record_all else list(RECORDED)
    load_start = [round(x, 2) for x in os.getloadavg()]
    result = await replay(workflow_path, workflow, feed, record, quiet_s=quiet_s, only=only,
                          observer=lambda: sample_units(workflow, samples))
    origin = first_ts(data, sensor_files(data))
    assert origin is not None
    return Run(mode, origin, samples, windows, inputs, result.elapsed_s, result.feed, result.missed,
               load_start, [round(x, 2) for x in os.getloadavg()])
