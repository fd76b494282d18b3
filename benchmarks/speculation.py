"""`pan bench speculation`: query delay, CPU and snapshot memory of speculative ordering units (issue 17).

A generated match is replayed in real time with ``workflows/impair_jitter.json`` (jitter and reordering
inside packets, no loss) into the full-game workflow once per mode and repetition, interleaved: buffering
K-slack units, speculative units with alpha 1/3, and speculative units with ``alpha: "auto"`` under
two CPU signals: the default (``cpu: component``, the seed's busy factor) and ``cpu: loop`` (the worker's
loop thread, waits for a core included); the ``ordering`` key is set on every ordered worker
(``with_ordering``). A client process
(``benchmarks/observer.py --view raw``) notes when each tuple of ``SENSOR105``, ``B2`` and
``BP_wholeGame_A`` arrives; a speculative tuple counts with the arrival of the version the client kept
(a retracted one is read again, and its replacement's arrival counts). Query delay as in
`pan bench query-delay`. Every ordered worker's ``/streams`` and its peer process's CPU time are
sampled while it runs: replays, retractions, peak snapshot bytes, alpha. A few derived streams
(``CHECKED``) are recorded in their settled view, and each mode's recording is compared byte for byte
with the buffering run's of the same repetition. One more replay in ``auto`` mode starts a CPU hog
(one busy process per core) halfway through and plots alpha over time.

``with_ordering`` is shared with the acceptance test ``tests/bench/test_speculative_replay.py``.
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
from pathlib import Path
from typing import Any

from benchmarks import common
from benchmarks.ordering_modes import prepare_data
from benchmarks.ordering_modes_summary import spread
from benchmarks.query_delay import load_avg
from pan.util import eventloop

HELP = "query delay, CPU, snapshot bytes and replays of buffering vs speculative (alpha 1/3, two autos) units"
SECTION = "speculation-bench"
ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "workflows" / "full_game_14_peers.json"  # one worker per peer: CPU time per worker
IMPAIR = ROOT / "workflows" / "impair_jitter.json"
MODES: dict[str, dict[str, Any] | None] = {
    "buffering": None,
    "alpha 1/3": {"mode": "speculative", "alpha": 1 / 3},
    "alpha auto": {"mode": "speculative", "alpha": "auto"},
    "alpha auto, cpu loop": {"mode": "speculative", "alpha": "auto", "cpu": "loop"},
}
DELAY_STREAMS = ["SENSOR105", "B2", "BP_wholeGame_A"]
#: Derived streams recorded in their settled view and compared between the modes: one of each query.
CHECKED = ["ACTIVEBALL", "BALLHITS", "SHOTS", "B2", "A5", "BP_wholeGame_A", "BP_wholeGame_B",
           "HM_1min_16x25_A2", "RUN_A2", "RUNAGG_1min_A2"]
#: K floor (ms): the impairment's disorder within one sensor stream stays below it, so no event is late
#: in any mode and the settled outputs must be equal (the acceptance test's floor).
MIN_K_MS = 300.0
SAMPLE_S = 0.5
PLOTTED = ("Active ball", "Ball hits", "Average team A", "Players possession", "Heat maps team A")
PS_PER_MS = 10**9


def with_ordering(workflow_path: Path, work: Path, ordering: dict[str, Any] | None,
                  params: dict[str, Any] | None = None) -> Path:
    """The workflow on free ports, in ``work``, with ``ordering`` set on every ordered worker.

    Ordered workers are those whose params set a clock mode; ``params`` is added to theirs
    (e.g. ``min_k``). ``ordering`` None: buffering units (the key is removed).
    """
    from pan.workflow.parser import on_free_ports

    data = on_free_ports(json.loads(Path(workflow_path).read_text()))
    for worker in data["workers"]:
        if "clock_mode" not in worker.get("params", {}):
            continue
        worker["params"] = {**worker["params"], **(params or {})}
        worker.pop("ordering", None)
        if ordering is not None:
            worker["ordering"] = dict(ordering)
    path = work / f"{Path(workflow_path).stem}-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(data))
    return path


# --- sampling workers and peer processes -------------------------------------------------


class Sampler:
    """Every ordered worker's speculation counters and every peer's CPU seconds, every ``SAMPLE_S``."""

    def __init__(self, workflow_path: Path, workflow: Any) -> None:
        self.path = str(workflow_path)
        self.specs = [spec for spec in workflow.workers if "clock_mode" in spec.params]
        self.peer_of = {spec.name: spec.peer for spec in workflow.workers}
        self.samples: dict[str, list[dict[str, Any]]] = {spec.name: [] for spec in self.specs}
        self.cpu_s: dict[str, float] = {}  # peer -> user + system seconds, last seen
        self._procs: dict[str, Any] = {}
        self.started = time.monotonic()

    def _find_peers(self) -> None:
        import psutil

        for proc in psutil.process_iter(["cmdline"]):
            cmd = proc.info.get("cmdline") or []
            if "peer" in cmd and self.path in cmd and "--name" in cmd:
                self._procs.setdefault(cmd[cmd.index("--name") + 1], proc)

    def _read_cpu(self) -> None:
        import psutil

        for peer, proc in self._procs.items():
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                self.cpu_s[peer] = times.user + times.system

    async def run(self) -> None:
        import aiohttp

        async def one(session: aiohttp.ClientSession, spec: Any) -> None:
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError, ValueError, KeyError):
                async with session.get(f"http://{spec.host}:{spec.port}/streams") as resp:
                    body = await resp.json(content_type=None)
                spec_info = body["component"]["ordering"].get("speculation", {})
                outputs = body["outputs"].values()
                self.samples[spec.name].append({
                    "t": round(time.monotonic() - self.started, 3),
                    "alpha": spec_info.get("alpha", 1.0),
                    "replays": spec_info.get("replays", 0),
                    "premature": spec_info.get("premature", 0),
                    "snapshot_bytes_peak": spec_info.get("snapshot_bytes_peak", 0),
                    "retractions": sum(o.get("retractions", 0) for o in outputs),
                    "late": body["component"]["ordering"].get("late", 0),
                })

        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            while True:
                if len(self._procs) < len(set(self.peer_of.values())):
                    self._find_peers()
                self._read_cpu()
                await asyncio.gather(*(one(session, spec) for spec in self.specs))
                await asyncio.sleep(SAMPLE_S)

    def last(self, worker: str, key: str) -> float:
        return self.samples[worker][-1][key] if self.samples[worker] else 0

    def worker_cpu_s(self) -> dict[str, float]:
        """CPU seconds per ordered worker: its peer's, shared evenly by the ordered workers of that peer."""
        sharing: dict[str, int] = {}
        for spec in self.specs:
            sharing[spec.peer] = sharing.get(spec.peer, 0) + 1
        return {spec.name: round(self.cpu_s.get(spec.peer, float("nan")) / sharing[spec.peer], 2)
                for spec in self.specs}


# --- one replay ---------------------------------------------------------------------------


async def replay_once(workflow_path: Path, data: Path, work: Path, impair: Path,
                      hog_after_s: float | None = None) -> dict[str, Any]:
    """One real-time replay: delays of ``DELAY_STREAMS`` (raw view), samples, CPU, and ``CHECKED`` recorded."""
    from benchmarks.observer import read_kept_arrivals
    from benchmarks.query_delay import delays
    from pan.workflow.parser import load_workflow
    from simulator.impair import ImpairProfile
    from simulator.replay import replay
    from simulator.simulate import simulate
    from simulator.simulate_options import SimulateOptions

    workflow = load_workflow(workflow_path)
    send_log = work / "send.csv"
    options = SimulateOptions(workflow=workflow, data_dir=data, speedup=1.0, send_log=send_log,
                              impair=ImpairProfile.load(impair), skip_halftime=True)
    sampler = Sampler(workflow_path, workflow)
    hogs: list[asyncio.subprocess.Process] = []

    async def feed() -> Any:
        hog_task = asyncio.create_task(start_hogs(hogs, hog_after_s)) if hog_after_s is not None else None
        try:
            return (await simulate(options)).as_dict()
        finally:
            if hog_task is not None:
                hog_task.cancel()

    arrivals = work / "received.csv"
    observer = common.Child(
        [sys.executable, "-m", "benchmarks.observer", "--repository", workflow.repository.address,
         "--out", str(arrivals), "--view", "raw", *DELAY_STREAMS], startup_s=30.0, grace_s=30.0,
    )
    load_start = load_avg()
    started = time.monotonic()
    try:
        async with observer:
            if observer.ready_line.strip() != b"ready":
                raise RuntimeError(f"observer process did not start (said {observer.ready_line!r})")
            result = await replay(workflow_path, workflow, feed, work / "record", only=CHECKED, until_ended=True,
                                  observer=sampler.run)
    finally:
        await stop_hogs(hogs)
    elapsed = time.monotonic() - started
    kept, client_retractions = read_kept_arrivals(arrivals, DELAY_STREAMS)
    measured = delays(send_log, kept)
    workers = list(sampler.samples)
    return {
        "elapsed_s": round(elapsed, 2),
        "replay_elapsed_s": round(result.elapsed_s, 2),
        "load_start": load_start,
        "load_end": load_avg(),
        "streams": {stream: common.summarize_ms(values) for stream, values in measured.items()},
        "client_retractions": client_retractions,
        "replays": sum(sampler.last(w, "replays") for w in workers),
        "retractions": sum(sampler.last(w, "retractions") for w in workers),
        "late": sum(sampler.last(w, "late") for w in workers),
        "late_by_worker": {w: sampler.last(w, "late") for w in workers if sampler.last(w, "late")},
        "premature": sum(sampler.last(w, "premature") for w in workers),
        "cpu_s": sampler.worker_cpu_s(),
        "snapshot_bytes_peak": {w: sampler.last(w, "snapshot_bytes_peak") for w in workers},
        "alpha": {w: [(s["t"], s["alpha"]) for s in ss] for w, ss in sampler.samples.items()},
        "missed": result.missed,
        "record": str(work / "record"),
    }


async def start_hogs(hogs: list[asyncio.subprocess.Process], after_s: float) -> None:
    """After ``after_s``: one busy process per core (the load `alpha: "auto"` should back off from)."""
    await asyncio.sleep(after_s)
    for _ in range(os.cpu_count() or 1):
        hogs.append(await asyncio.create_subprocess_exec(sys.executable, "-c", "while True: pass"))


async def stop_hogs(hogs: list[asyncio.subprocess.Process]) -> None:
    for hog in hogs:
        with contextlib.suppress(ProcessLookupError):
            hog.kill()
        await asyncio.wait_for(hog.wait(), 10)


def recorded(record: str | Path, checked: list[str]) -> dict[str, bytes]:
    record = Path(record)
    return {name: (record / f"{name}.jsonl").read_bytes() if (record / f"{name}.jsonl").exists() else b""
            for name in checked}


def checked_streams(workflow_path: Path) -> list[str]:
    """The streams of ``CHECKED`` that the workflow makes (a smaller workflow has no heat maps, say)."""
    from pan.workflow.parser import load_workflow
    from simulator.replay import output_streams

    made = set(output_streams(load_workflow(workflow_path)))
    return [name for name in CHECKED if name in made]


# --- the benchmark ------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workflow", type=Path, default=WORKFLOW,
                   help="full-game workflow (ordered workers get the `ordering` key of each mode)")
    p.add_argument("--minutes", type=float, default=1.0,
                   help="minutes of play replayed: the first half of a generated match (seed 2013)")
    p.add_argument("--data", type=Path, help="a `pan split` folder to use instead of generating one")
    p.add_argument("--reps", type=int, default=5, help="replays per mode, interleaved (medians and spread)")
    p.add_argument("--impair", type=Path, default=IMPAIR, help="impairment profile")
    p.add_argument("--min-k-ms", type=float, default=MIN_K_MS, help="K floor of every ordered worker (ms)")
    p.add_argument("--quick", action="store_true", help="10 s of match, one replay per mode, a 10 s hog run")
    p.add_argument("--write", type=Path, help="update this markdown report (e.g. docs/benchmarks.md); "
                   "its plot goes to img/ beside it")


def run(args: argparse.Namespace) -> int:
    if args.reps < 1 or args.min_k_ms < 0:
        print("pan bench speculation: --reps must be >= 1 and --min-k-ms >= 0", file=sys.stderr)
        return 2
    for path in (args.workflow, args.impair):
        if not Path(path).is_file():
            print(f"pan bench speculation: {path}: no such file", file=sys.stderr)
            return 2
    machine = common.machine()
    reps = 1 if args.quick else args.reps
    params = {"clock_mode": "watermark", "min_k": int(args.min_k_ms * PS_PER_MS)}
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    references: dict[int, dict[str, bytes]] = {}
    checked = checked_streams(args.workflow)
    with tempfile.TemporaryDirectory(prefix="pan-speculation-") as tmp:
        work = Path(tmp)
        data = prepare_data(args, work, quick_s=10)
        match_s = match_seconds(data)
        for rep in range(reps):
            for n, (mode, ordering) in enumerate(MODES.items()):  # interleaved: load drifts hit every mode alike
                run_dir = work / f"mode{n}-{rep}"
                run_dir.mkdir()
                one = replay_retrying(args.workflow, run_dir, ordering, params, data, args.impair)
                mine = recorded(one.pop("record"), checked)
                reference = references.setdefault(rep, mine)  # the buffering replay comes first in each rep
                one["settled_equal"] = mine == reference
                one["settled_differ"] = [name for name in checked if mine[name] != reference[name]]
                one["settled_tuples"] = sum(v.count(b"\n") for v in mine.values())
                runs[mode].append(one)
                print(f"{mode} #{rep + 1}: " + ", ".join(
                    f"{s} p50 {common.fmt(d['p50_ms'])} ms" for s, d in one["streams"].items())
                      + f"; replays {one['replays']}, settled equal {one['settled_equal']}, "
                      f"load {one['load_start'][0]} -> {one['load_end'][0]}", file=sys.stderr, flush=True)
        hog_dir = work / "hog"
        hog_dir.mkdir()
        hog = replay_retrying(args.workflow, hog_dir, MODES["alpha auto"], params, data, args.impair,
                              hog_after_s=match_s / 2)
    summary = {**common.run_header("speculation"),
               "config": {"workflow": Path(args.workflow).name, "impair": Path(args.impair).name, "reps": reps,
                          "min_k_ms": args.min_k_ms, "match_s": match_s, "checked": checked,
                          "modes": MODES},
               "modes": {mode: summarize(rs) for mode, rs in runs.items()},
               "hog": {"after_s": match_s / 2, "alpha": hog["alpha"], "load_start": hog["load_start"],
                       "load_end": hog["load_end"], "replays": hog["replays"]},
               "runs": runs}
    common.publish(summary, args.write, SECTION, lambda: report(summary, machine),
                   lambda png: plot(summary["hog"], png))
    return 0


def replay_retrying(workflow: Path, run_dir: Path, ordering: dict[str, Any] | None, params: dict[str, Any],
                    data: Path, impair: Path, hog_after_s: float | None = None, attempts: int = 3) -> dict[str, Any]:
    """``replay_once`` on fresh free ports, again if the workflow could not start (a port taken meanwhile by
    another program, or peers too slow to register on a loaded machine)."""
    from pan.repository.client import PublishersMissing
    from simulator.replay import WorkflowStopped

    for attempt in range(attempts):
        work = run_dir / f"attempt-{attempt}"
        work.mkdir()
        try:
            return eventloop.run(replay_once(with_ordering(workflow, work, ordering, params), data, work, impair,
                                             hog_after_s=hog_after_s))
        except (WorkflowStopped, PublishersMissing) as exc:
            if attempt == attempts - 1:
                raise
            print(f"replay did not run ({exc}); again on other ports", file=sys.stderr, flush=True)
    raise AssertionError("unreachable")


def match_seconds(data: Path) -> float:
    """Event seconds from the first to the last row of a split folder."""
    from simulator.sources import first_ts, sensor_files

    files = sensor_files(data)
    first = first_ts(data, files)
    last = max(int(line.split(b",", 2)[1]) for p in data.glob("SENSOR*.csv")
               for line in p.read_bytes().splitlines()[-1:] if line)
    return 0.0 if first is None else (last - first) / 10**12


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per mode: delays as medians over the repetitions with min-max, rates, CPU and snapshot peaks."""
    workers = list(runs[0]["cpu_s"])
    return {
        "streams": {s: common.combine_delays([r["streams"][s] for r in runs]) for s in DELAY_STREAMS},
        "replays_per_s": spread([r["replays"] / r["elapsed_s"] for r in runs]),
        "retractions_per_s": spread([r["retractions"] / r["elapsed_s"] for r in runs]),
        "settled_equal": sum(r["settled_equal"] for r in runs),
        "late": sum(r["late"] for r in runs),
        "cpu_s": {w: spread([r["cpu_s"][w] for r in runs]) for w in workers},
        "cpu_s_total": spread([sum(r["cpu_s"].values()) for r in runs]),
        "snapshot_bytes_peak": {w: max(r["snapshot_bytes_peak"][w] for r in runs) for w in workers},
        "load_start": [r["load_start"][0] for r in runs],
        "load_end": [r["load_end"][0] for r in runs],
        "reps": len(runs),
    }


def plot(hog: dict[str, Any], path: Path) -> Path:
    from benchmarks import plots

    fig, [ax] = plots.figure()
    for worker in [w for w in PLOTTED if hog["alpha"].get(w)]:  # those the workflow has
        points = hog["alpha"][worker]
        ax.step([p[0] for p in points], [p[1] for p in points], where="post", label=worker, linewidth=1.2)
    ax.axvline(hog["after_s"], color="grey", linestyle="--", linewidth=1, label="CPU hog starts")
    plots.decorate(ax, 'alpha over time, "auto", a CPU hog from halfway', "wall seconds since the start", "alpha")
    return plots.save(fig, path)


def _cell(s: dict[str, float], digits: int = 1) -> str:
    if s["median"] != s["median"]:
        return "-"
    return f"{common.fmt(s['median'], digits)} ({common.fmt(s['min'], digits)}-{common.fmt(s['max'], digits)})"


def report(summary: dict[str, Any], machine: dict[str, Any]) -> str:
    config, modes = summary["config"], summary["modes"]
    base = modes["buffering"]["streams"]
    delay_rows = []
    for mode, m in modes.items():
        for stream in DELAY_STREAMS:
            s = m["streams"][stream]
            ratio = (s["p50_ms"] / base[stream]["p50_ms"]
                     if s["p50_ms"] is not None and base[stream]["p50_ms"] else None)
            delay_rows.append([mode, f"`{stream}`", s["count"], common.with_spread(s, "p50_ms"),
                               common.with_spread(s, "p99_ms"), common.fmt(ratio, 2)])
    mode_rows = [[mode, _cell(m["replays_per_s"]), _cell(m["retractions_per_s"]), _cell(m["cpu_s_total"]),
                  common.fmt(max(m["snapshot_bytes_peak"].values(), default=0) / 2**20, 2),
                  f"{m['settled_equal']} / {m['reps']}", m["late"],
                  ", ".join(f"{x:.1f}" for x in m["load_start"])]
                 for mode, m in modes.items()]
    workers = list(modes["buffering"]["cpu_s"])
    worker_rows = [[w, *[_cell(m["cpu_s"][w]) for m in modes.values()],
                    *[common.fmt(m["snapshot_bytes_peak"][w] / 2**20, 2) for mode, m in modes.items()
                      if mode != "buffering"]] for w in workers]
    speculative = [mode for mode in modes if mode != "buffering"]
    return "\n".join([
        "## Speculative ordering units (`pan bench speculation`, issue 17)",
        "",
        f"{summary['date']}. {common.machine_line(machine)}",
        f"Command: `{summary['command']}`. {config['match_s']:.0f} s of play (the first half of a generated match) "
        f"replayed in real time with `{config['impair']}` into `{config['workflow']}` (a worker's CPU is its peer "
        f"process's, shared evenly by the ordered workers on that peer), {config['reps']} replays per mode, "
        "interleaved. Every ordered worker runs in watermark "
        f"mode with a K floor of {config['min_k_ms']:g} ms (above the profile's disorder, so no event is late "
        "and the settled outputs must be equal); the speculative modes set `\"ordering\": {\"mode\": "
        "\"speculative\", \"alpha\": ...}` on every one of them and read their inputs raw.",
        "Query delay = receive time at a client process (`benchmarks/observer.py --view raw`) - send time of "
        "the sensor row the tuple answers, for the version of each tuple the client kept (a retracted tuple "
        "counts with its replacement's arrival). Cells: median over the replays, min-max in brackets. "
        "Load average (1 min) at the start of each replay in the last column of the second table.",
        "",
        common.markdown_table(["mode", "stream", "tuples", "p50 ms", "p99 ms", "p50 / buffering"], delay_rows),
        "",
        f"Settled outputs: `{'`, `'.join(config['checked'])}` recorded in their settled view and compared byte "
        "for byte with the buffering replay of the same repetition. Replays and retractions (of all ordered "
        "workers' outputs) per second of replay; CPU = user + system seconds of the peer processes of the "
        "ordered workers.",
        "",
        common.markdown_table(["mode", "replays / s", "retractions / s", "CPU s (ordered workers)",
                               "peak snapshot MiB (worst worker)", "settled outputs equal", "late events",
                               "load at start"], mode_rows),
        "",
        common.markdown_table(["worker", *[f"CPU s, {mode}" for mode in modes],
                               *[f"peak snapshot MiB, {mode}" for mode in speculative]], worker_rows),
        "",
        common.image_link(SECTION, "alpha over time with a CPU hog"),
        "",
        f"The plot: one more replay with `\"alpha\": \"auto\"`; {os.cpu_count()} busy processes (one per core) "
        f"start {summary['hog']['after_s']:.0f} s in (load {summary['hog']['load_start'][0]} at the start, "
        f"{summary['hog']['load_end'][0]} at the end).",
    ])
