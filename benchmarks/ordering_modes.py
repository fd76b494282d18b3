"""`pan bench ordering-modes`: K over time and late events, watermark against max (clock-stream) ordering.

A generated match is replayed in real time into the full-game workflow in
both ordering modes (``full_game_3_peers.json`` and its ``_max`` twin), with
an impairment profile of jitter, reordering, loss and drop outages on balls
and players (``workflows/impair_outages.json``). While it runs, every ordered
worker's ``/streams`` is read every 0.1 s: the unit's K, clk (event time),
events pushed and late events. Reported per mode, as medians of the
repetitions with their spread: the late fraction, K, and K one K window (the
unit's ``window`` of measurements) after each reconnect against K just before
the outage.

The sampling and the outage bookkeeping are shared with the acceptance tests
(``tests/bench/test_ordering_modes.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from benchmarks import common
from pan.util import eventloop

HELP = "K over time and late fraction of watermark vs max ordering, replaying with jitter, loss and drop outages"
SECTION = "ordering_modes"
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
PS = 10**12
#: The units drawn in the plot (the others' K stays near 0 in both modes).
#: How far (event seconds) a quiet point for ``noise_ratio`` stays from every outage window.
QUIET_MARGIN_S = 3.0
PLOTTED = ("Active ball", "Ball hits", "Average team A", "Players possession")


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


# --- running one replay -------------------------------------------------------------------


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
    from simulator.simulate import SimulateOptions, simulate
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


# --- outages and recovery -----------------------------------------------------------------


def outage_windows(profile_path: Path) -> dict[str, list[tuple[float, float]]]:
    """Input stream -> its drop-outage windows (event seconds after the first row), from the profile."""
    from simulator.impair import ImpairProfile

    profile = ImpairProfile.load(profile_path)
    out: dict[str, list[tuple[float, float]]] = {}
    for sid, kind in profile.kind_of_sid.items():
        params = profile.params.get(kind)
        if params is not None and params.outage_windows_s and params.outage_mode == "drop":
            out[f"SENSOR{sid}"] = list(params.outage_windows_s)
    default = profile.params.get(profile.default_kind)
    if default is not None and default.outage_windows_s and default.outage_mode == "drop":
        out["*"] = list(default.outage_windows_s)
    return out


@dataclass(frozen=True)
class Recovery:
    """K of one unit just before an outage of some of its inputs and one K window after the reconnect."""

    worker: str
    window_s: tuple[float, float]
    k_before: int
    k_after: int
    pushed_after: int  # events the unit had been given when k_after was read (reconnect + one window)
    noise: float  # the largest K ratio over the same span at points of this run far from every outage

    @property
    def ratio(self) -> float:
        return _ratio(self.k_before, self.k_after)

    @property
    def ok(self) -> bool:
        """K back under twice its value before the outage (or not above it at all)."""
        return self.k_after < 2 * self.k_before or self.k_after <= self.k_before

    @property
    def within_noise(self) -> bool:
        """K rose no more than this run's scheduling alone made it rise, with no outage anywhere near.

        In max mode K follows the delays the machine's scheduling adds; on a loaded
        machine K doubles over some spans without any outage. Only a rise beyond
        all of those can be blamed on the reconnect.
        """
        return self.ratio <= self.noise


def _ratio(before: int, after: int) -> float:
    return after / before if before else (1.0 if not after else float("inf"))


def k_change(run: Run, worker: str, start_ts: int, end_ts: int) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The unit's samples just before ``start_ts`` and one K window after its clk passed ``end_ts``.

    Before = the last sample whose clk is before ``start_ts``; after = the first
    sample in which the unit has been given one K window (``window`` events)
    more than when its clk first passed ``end_ts``. None if the run did not get there.
    """
    timeline = [s for s in run.samples[worker] if s["clk"] is not None]
    before = [s for s in timeline if s["clk"] < start_ts]
    passed = next((s for s in timeline if s["clk"] >= end_ts), None)
    if not before or passed is None:
        return None
    after = next((s for s in timeline if s["pushed"] >= passed["pushed"] + run.windows[worker]), None)
    return None if after is None else (before[-1], after)


def noise_ratio(run: Run, worker: str, span_s: float, outages: list[tuple[float, float]]) -> float:
    """The largest K ratio (``k_change`` over ``span_s``) at whole event seconds far from every outage.

    Far = at least ``QUIET_MARGIN_S`` from each outage window, of any stream.
    """
    last_clk = max((s["clk"] for s in run.samples[worker] if s["clk"] is not None), default=run.origin_ts)
    last_s = (last_clk - run.origin_ts) / PS
    ratios = []
    for t in range(3, int(last_s - span_s)):  # from 3 s: K is warmed up
        if any(t + span_s > a - QUIET_MARGIN_S and t < b + QUIET_MARGIN_S for a, b in outages):
            continue
        change = k_change(run, worker, run.origin_ts + t * PS, run.origin_ts + int((t + span_s) * PS))
        if change is not None and change[0]["k"]:  # a rise from K = 0 has no ratio to compare with
            ratios.append(_ratio(change[0]["k"], change[1]["k"]))
    return max(ratios, default=1.0)


def late_near_and_far(run: Run, worker: str, affected: list[tuple[float, float]],
                      every_outage: list[tuple[float, float]]) -> tuple[float, float]:
    """Late fraction of one unit near its inputs' outages, and far from every outage.

    Near = sample intervals whose clk lies between the start of an outage of one of
    the unit's inputs and ``QUIET_MARGIN_S`` after its reconnect; far = intervals
    at least ``QUIET_MARGIN_S`` from every outage, after a 3 s warm-up. In max mode
    delays follow the machine's scheduling, so the far fraction is what load alone
    makes late; only the excess near outages can be blamed on them. NaN where a
    span got no events.
    """
    near, far = [0, 0], [0, 0]  # late, pushed
    timeline = [s for s in run.samples[worker] if s["clk"] is not None]
    for prev, cur in pairwise(timeline):
        t = (cur["clk"] - run.origin_ts) / PS
        late, pushed = cur["late"] - prev["late"], cur["pushed"] - prev["pushed"]
        if any(a <= t <= b + QUIET_MARGIN_S for a, b in affected):
            near[0] += late
            near[1] += pushed
        elif t >= 3 and all(t < a - QUIET_MARGIN_S or t > b + QUIET_MARGIN_S for a, b in every_outage):
            far[0] += late
            far[1] += pushed
    return tuple(n / d if d else float("nan") for n, d in (near, far))  # type: ignore[return-value]


def all_outages(windows_by_stream: dict[str, list[tuple[float, float]]]) -> list[tuple[float, float]]:
    """Every outage window of the profile, of any stream, once each."""
    return sorted({w for ws in windows_by_stream.values() for w in ws})


def affected_outages(run: Run, worker: str,
                     windows_by_stream: dict[str, list[tuple[float, float]]]) -> list[tuple[float, float]]:
    """The outage windows of the unit's input streams (the profile's default kind stands for other sensors)."""
    stream_names = run.inputs[worker]
    affected = sorted({w for s in stream_names for w in windows_by_stream.get(s, [])})
    if not affected and "*" in windows_by_stream and any(s.startswith("SENSOR") for s in stream_names):
        affected = windows_by_stream["*"]
    return affected


def recoveries(run: Run, windows_by_stream: dict[str, list[tuple[float, float]]]) -> list[Recovery]:
    """For each unit fed by a sensor with drop outages and each of those outages: K before and after.

    Outages the run did not reach are skipped. Each carries the run's noise:
    the same measurement at quiet points (``noise_ratio``).
    """
    every_outage = all_outages(windows_by_stream)
    out = []
    for worker in run.inputs:
        for start, end in affected_outages(run, worker, windows_by_stream):
            change = k_change(run, worker, run.origin_ts + int(start * PS), run.origin_ts + int(end * PS))
            if change is None:
                continue
            before, after = change
            out.append(Recovery(worker, (start, end), before["k"], after["k"], after["pushed"],
                                noise_ratio(run, worker, end - start, every_outage)))
    return out


# --- the benchmark ------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--minutes", type=float, default=1.0,
                   help="minutes of play replayed: the first half of a generated match (seed 2013)")
    p.add_argument("--data", type=Path, help="a `pan split` folder to use instead of generating one")
    p.add_argument("--reps", type=int, default=5, help="replays per mode (medians and spread are reported)")
    p.add_argument("--speedup", type=float, default=1.0, help="event-time factor of the replay (1 = real time)")
    p.add_argument("--impair", type=Path, default=IMPAIR, help="impairment profile")
    p.add_argument("--quick", action="store_true", help="20 s of match, one replay per mode")
    p.add_argument("--write", type=Path, help="update this markdown report (e.g. docs/ordering.md); "
                   "its plot goes to img/ beside it")


def first_half(game: Path, out: Path) -> Path:
    """A generated match's first half as a split folder (without Spark).

    The profile's outage windows are seconds after the first row: with one half
    they are event seconds too, and no half-time jump (nearly half an hour of
    game time at once for a short match) loads the machine in the middle.
    """
    from benchmarks.query_delay import plain_split
    from simulator.debs import HALF1

    return plain_split(game, out, until_ts=HALF1[1])


def prepare_data(args: argparse.Namespace, work: Path, quick_s: float = 20) -> Path:
    """A split folder: given, or the first half of a generated realistic match (``quick_s`` of play with
    ``--quick``, else ``--minutes``)."""
    if args.data is not None:
        from benchmarks.query_delay import given_split

        return given_split(Path(args.data))
    from simulator.realistic import generate

    generate(work / "game", 2 * (quick_s / 60 if args.quick else args.minutes), seed=2013)
    return first_half(work / "game", work / "split")


def run(args: argparse.Namespace) -> int:
    machine = common.machine()
    reps = 1 if args.quick else max(1, args.reps)
    runs: dict[str, list[Run]] = {mode: [] for mode in WORKFLOWS}
    with tempfile.TemporaryDirectory(prefix="pan-ordering-modes-") as tmp:
        work = Path(tmp)
        data = prepare_data(args, work)
        for rep in range(reps):
            for mode, workflow in WORKFLOWS.items():  # interleaved, so load drifts hit both modes alike
                out = work / f"{mode}-{rep}"
                one = eventloop.run(replay_sampled(moved(workflow, work), data, out, mode=mode,
                                                 impair=args.impair, speedup=args.speedup))
                runs[mode].append(one)
                print(f"{mode} #{rep + 1}: late {one.late_fraction():.5f}, {one.elapsed_s:.0f} s, "
                      f"load {one.load_start} -> {one.load_end}", file=sys.stderr, flush=True)
    windows = outage_windows(args.impair)
    summary = {**common.run_header("ordering-modes"),
               "modes": {mode: summarize(rs, windows) for mode, rs in runs.items()}}
    summary["runs"] = {mode: [r.as_dict() for r in rs] for mode, rs in runs.items()}
    common.publish(summary, args.write, SECTION, lambda: report(summary, machine, args, reps),
                   lambda png: plot({mode: kseries(median_run(rs)) for mode, rs in runs.items()}, windows, png))
    return 0


def spread(values: Sequence[float]) -> dict[str, float]:
    vals = [v for v in values if v == v]
    return {"median": common.median(vals), "min": min(vals, default=float("nan")),
            "max": max(vals, default=float("nan"))}


def summarize(runs: list[Run], windows: dict[str, list[tuple[float, float]]]) -> dict[str, Any]:
    """Medians over the repetitions of one mode, with min and max."""
    units = list(runs[0].samples)
    per_run_rec = [recoveries(r, windows) for r in runs]
    return {
        "late_fraction": spread([r.late_fraction() for r in runs]),
        "worst_unit_late_fraction": spread([max(r.late_fraction(u) for u in units) for r in runs]),
        "recovery_worst_ratio": spread([max((x.ratio for x in rec), default=float("nan")) for rec in per_run_rec]),
        "recoveries_ok": sum(x.ok for rec in per_run_rec for x in rec),
        "recoveries": sum(len(rec) for rec in per_run_rec),
        "recoveries_beyond_noise": sum(not x.ok and not x.within_noise for rec in per_run_rec for x in rec),
        "noise_worst_ratio": spread([max((x.noise for x in rec), default=float("nan")) for rec in per_run_rec]),
        "k_ms": {u: {"median": spread([median_k_ms(r, u) for r in runs]),
                     "max": spread([max((s["k"] for s in r.samples[u]), default=0) / 1e9 for r in runs])}
                 for u in units},
        "late": {u: spread([r.late_fraction(u) for r in runs]) for u in units},
        "load_start": [r.load_start for r in runs],
        "load_end": [r.load_end for r in runs],
        "elapsed_s": spread([r.elapsed_s for r in runs]),
    }


def median_k_ms(run: Run, worker: str) -> float:
    return common.median(s["k"] / 1e9 for s in run.samples[worker] if s["clk"] is not None)


def median_run(runs: list[Run]) -> Run:
    """The repetition with the median late fraction (the one plotted)."""
    return sorted(runs, key=lambda r: r.late_fraction())[len(runs) // 2]


def kseries(run: Run) -> dict[str, list[tuple[float, float]]]:
    """Per plotted unit: (event seconds after the first row, K in ms), one point per sample."""
    return {u: [((s["clk"] - run.origin_ts) / PS, s["k"] / 1e9) for s in run.samples[u]
                if s["clk"] is not None and s["clk"] < run.origin_ts + 10**6 * PS]
            for u in PLOTTED if u in run.samples}


def plot(series: dict[str, dict[str, list[tuple[float, float]]]],
         windows: dict[str, list[tuple[float, float]]], path: Path) -> Path:
    from benchmarks import plots

    fig, axes = plots.figure(len(series))
    balls = {w for s, ws in windows.items() if s in ("SENSOR4", "SENSOR8", "SENSOR10", "SENSOR12") for w in ws}
    players = {w for s, ws in windows.items() for w in ws} - balls
    end = max((p[0] for units in series.values() for pts in units.values() for p in pts), default=0.0)
    for ax, (mode, units) in zip(axes, series.items(), strict=True):
        for label, spans, colour in (("ball outages", balls, "tab:orange"), ("player outages", players, "tab:green")):
            for n, (a, b) in enumerate(w for w in sorted(spans) if w[0] < end):
                ax.axvspan(a, b, color=colour, alpha=0.15, label=label if n == 0 else None)
        for unit, pts in units.items():
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=unit, linewidth=1.2)
        plots.decorate(ax, f"K over time, {mode} mode", "event time since the first row (s)", "K (ms)")
    return plots.save(fig, path)


def _cell(s: dict[str, float], scale: float = 1.0, digits: int = 1, pct: bool = False) -> str:
    if s["median"] != s["median"]:
        return "-"
    f = (lambda v: f"{v * 100:.3f}%") if pct else (lambda v: common.fmt(v * scale, digits))
    return f"{f(s['median'])} ({f(s['min'])} to {f(s['max'])})"


def report(summary: dict[str, Any], machine: dict[str, Any], args: argparse.Namespace, reps: int) -> str:
    modes = summary["modes"]
    rows = []
    for mode, m in modes.items():
        rows.append([mode, _cell(m["late_fraction"], pct=True), _cell(m["worst_unit_late_fraction"], pct=True),
                     f"{m['recoveries_ok']} / {m['recoveries']}", _cell(m["recovery_worst_ratio"], digits=2),
                     _cell(m["noise_worst_ratio"], digits=2), str(m["recoveries_beyond_noise"]),
                     *[_cell(m["k_ms"][u]["median"]) for u in PLOTTED],
                     _cell(m["elapsed_s"], digits=0)])
    table = common.markdown_table(
        ["mode", "late fraction, all units", "worst unit", "K back < 2x in one window", "worst K after / before",
         "worst K ratio without an outage", "above 2x and above that",
         *[f"median K {u} (ms)" for u in PLOTTED], "replay (s)"], rows)
    loads = "; ".join(f"{mode}: " + ", ".join(f"{a[0]:.1f}→{b[0]:.1f}" for a, b in
                                              zip(m["load_start"], m["load_end"], strict=True))
                      for mode, m in modes.items())
    length = "20 s" if args.quick else f"{args.minutes:g} min"
    match = f"`{args.data}`" if args.data else f"{length} of play, the first half of a generated realistic match"
    return "\n".join([
        "## Watermark and max mode under impairments (`pan bench ordering-modes`)",
        "",
        f"{summary['date']}. {common.machine_line(machine)}",
        f"Command: `{summary['command']}`. {match}, replayed at speedup {args.speedup:g} into "
        f"`full_game_3_peers.json` (watermark) and `full_game_3_peers_max.json` (max), {reps} replays per mode, "
        f"interleaved, with `{Path(args.impair).name}`: jitter, reordering inside packets, 0.2% packet loss and "
        "drop outages (connection closed, rows lost, reconnect) of all balls and of half of the players "
        "(shaded in the plot).",
        "Each cell is the median over the replays, with the smallest and largest value in brackets. Late fraction "
        "= late events / events pushed into the units (`late`, `pushed` of `/streams`). Recovery: K one K "
        "window (`window` = 10,000 measurements) after the reconnect against K just before the outage, for "
        "each unit fed by a sensor that was out. "
        f"Load average (1 min) at the start → end of each replay: {loads}.",
        "",
        table,
        "",
        common.image_link(SECTION, "K over time in watermark and max mode"),
        "",
        "The plot shows the replay with the median late fraction of each mode.",
    ])
