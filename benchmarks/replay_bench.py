"""`pan bench replay`: fast (unpaced) replay throughput of a workflow, with CPU per process.

`pan replay WORKFLOW --data DIR --record OUT` runs as a subprocess on a
generated match (`query_delay.prepare_data`): it starts the workflow with
`pan run`, feeds it with the simulator unpaced (speedup 0, sensors in
lockstep), records every output stream and stops when the data ends.
Meanwhile the CPU times (user + system) of its whole process tree are sampled
every ``SAMPLE_S`` with psutil and each process is named from its command
line: the replay driver (simulator and recorder), the `pan run` launcher, the
repository and one process per peer.  Peers exit before the driver does, so
the last sample of each process is kept; up to ``SAMPLE_S`` of CPU per process
(its shutdown) is not counted.

Throughput = input rows sent / feed time (the simulator's run); multiple of
real time = event-time span of the data / feed time.

Each wire format of ``--wires`` (`benchmarks/wires.py`: JSON and Arrow pages by
default) is measured ``--reps`` times, the formats alternating (json, arrow,
json, arrow, ...) so drifting load hits both alike; every process of a run
(the driver and its recorder, the launcher, the repository, every peer) gets
``PAN_WIRE`` and is checked to have it. Reported per format: medians with
min-max, the ratio arrow / json, the load average before and after each run,
and whether every run recorded the same bytes.

``--per-worker`` also replays the same data into a variant of the workflow
with every worker on its own peer, so CPU per process = CPU per worker.  That
is not the same work: workers of one peer pull from each other in-process
(`pan/input/local.py`), one worker per process pulls everything over HTTP.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import common, floor_bench, pyspy, query_delay, wires
from pan.util import eventloop

if TYPE_CHECKING:
    import psutil

HELP = "fast (unpaced) replay throughput of the full-game workflow, with CPU per process (and per worker)"
SECTION = "replay-throughput"
SAMPLE_S = 0.5
TARGET_ROWS_PER_S = 150_000  # issue 5: 10x real time on the 2-core machine
PS = 10**12
KINDS = {"replay": ("driver", "replay driver"), "run": ("launcher", "launcher (pan run)"),
         "repository": ("repository", "repository")}  # `pan COMMAND` -> (kind, name)
LAYOUT_TITLES = {"by_peer": "as in the workflow", "pulls_batched": "as in the workflow, batched pulls",
                 "pulls_per_stream": "as in the workflow, pulls per stream", "by_worker": "one worker per process"}
#: py-spy attaches this long after every producer of the workflow has registered: the driver feeds from then
#: on (a fixed time from the start profiled the imports of a slow start instead, at load 10 and more).
PROFILE_AFTER_S = 2.0
#: Where a peer's time goes: (frame that roots the work, what it is), summed over the samples containing it.
PROFILE_AREAS = (
    ("IngestServer._handle", "TCP ingest of sensor rows (forwarders)"),
    ("InputChannel.pull", "pulling inputs (HTTP client or in-process fetch, JSON decoding)"),
    ("RequestHandler._handle_request", "serving HTTP requests (/data pages to other peers and the recorder)"),
    ("OrderedComponent.run", "ordering units and query components"),
    ("EpollSelector.select", "waiting in the event loop (idle)"),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workflow", default=str(query_delay.ROOT / "workflows" / "full_game_3_peers.json"))
    p.add_argument("--per-worker", action="store_true",
                   help="also replay a variant with every worker on its own peer (CPU per worker)")
    p.add_argument("--pulls", type=common.parse_pulls, default=None, metavar="P[,P]",
                   help=f"replay the workflow with each of these worker pulls ({common.PULLS_HELP}), "
                        "interleaved (default: as the workflow says)")
    p.add_argument("--profile", type=float, default=0.0, metavar="SECONDS",
                   help=f"sample every peer with py-spy for SECONDS, starting {PROFILE_AFTER_S:g} s after every "
                        "producer has registered (as in the workflow only), and report where the time goes")
    p.add_argument("--floor-reps", type=int, default=3, metavar="N",
                   help="also run `pan bench floor` N times on the same data and report each replay's rows/s as a "
                        "fraction of its median (0: not)")
    p.add_argument("--fixed-reps", type=int, default=3, metavar="N",
                   help="also replay N times without a row per wire (start-up, subscriptions, ends, stop), and "
                        "report the CPU of the rows alone and the driver's share of it (0: not)")
    p.add_argument("--recorder", type=parse_recorders, default=["lines"], metavar="R[,R]",
                   help="over JSON, replay with each of these recorders, interleaved (lines: it writes the bytes "
                        "of line pages as they come; decoded: it decodes every tuple and encodes it again) "
                        "(default: lines)")
    p.add_argument("--reps", type=int, default=5, metavar="N", help="replays per wire format and layout (default 5)")
    wires.add_argument(p)
    query_delay.add_replay_arguments(p, "20 s of match, no Spark")


RECORDERS = ("lines", "decoded")
#: The name of a run's wire in the report when its recorder decodes (``--recorder decoded``).
DECODING = ", recorder decodes"


def parse_recorders(text: str) -> list[str]:
    """``lines,decoded`` -> the recorders to compare, in that order (an argparse type)."""
    return common.comma_choices(text, RECORDERS)


def variants(wire_names: list[str], recorders: list[str]) -> list[tuple[str, str, bool]]:
    """(name in the report, wire, whether the recorder decodes) of every run of one layout and repetition."""
    return [(wire + (DECODING if recorder == "decoded" else ""), wire, recorder == "decoded")
            for wire in wire_names for recorder in (recorders if wire == "json" else ["lines"])]


# --- workflows ----------------------------------------------------------------------------


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


# --- CPU of the process tree ----------------------------------------------------------------


def classify(cmdline: list[str]) -> tuple[str, str]:
    """(kind, name) of a process of the replay, from its command line (`python -m pan COMMAND ...`).

    Kinds: driver, launcher, repository, peer (named after the peer) and other.
    """
    if "pan" not in cmdline:
        return "other", Path(cmdline[0]).name if cmdline else "?"
    args = cmdline[cmdline.index("pan") + 1 :]
    command = args[0] if args else ""
    if command == "peer" and "--name" in args[:-1]:
        return "peer", args[args.index("--name") + 1]
    return KINDS.get(command, ("other", f"pan {command}"))


def sample(root: psutil.Process, seen: dict[int, tuple[tuple[str, str], float]],
           wire_of: dict[int, str | None] | None = None) -> None:
    """Record ((kind, name), CPU seconds so far) of ``root`` and every descendant; a process's last sample wins.

    ``wire_of`` gets each process's ``PAN_WIRE`` (read once per process), to check a run used one format.
    """
    import psutil

    from pan.wire.arrow_pages import WIRE_ENV

    with contextlib.suppress(psutil.Error):
        tree = [root, *root.children(recursive=True)]
        for process in tree:
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                # read every time: right after fork a child still shows its parent's command line,
                # and an exited (zombie) one shows none
                cmdline = process.cmdline()
                key = classify(cmdline) if cmdline else seen.get(process.pid, (("other", "?"), 0.0))[0]
                seen[process.pid] = (key, times.user + times.system)
                if wire_of is not None and process.pid not in wire_of and cmdline:
                    wire_of[process.pid] = process.environ().get(WIRE_ENV)


async def start_profiles(
    seen: dict[int, tuple[tuple[str, str], float]], work: Path, seconds: float
) -> list[pyspy.Recording]:
    """One py-spy recorder per peer process seen so far."""
    binary = pyspy.py_spy()
    if binary is None:
        print("py-spy not found (dev extra): no profile", file=sys.stderr)
        return []
    recordings = [pyspy.Recording(name, pid, work / f"profile-{name}.txt")
                  for pid, ((kind, name), _) in seen.items() if kind == "peer"]
    for recording in recordings:
        await recording.start(binary, seconds)
    return recordings


async def producers_registered(workflow_path: Path) -> float:
    """Wait until every producer of the workflow has registered (the replay feeds from then on); monotonic time."""
    from pan.workflow.parser import load_workflow
    from simulator.replay import output_streams, wait_for_producers

    workflow = load_workflow(workflow_path)
    await wait_for_producers(workflow, output_streams(workflow))
    return time.monotonic()


async def replay_with_cpu(
    workflow: Path, data: Path, work: Path, wire: str, profile_s: float = 0.0, decode: bool = False,
    to_ts: int | None = None,
) -> tuple[dict[str, Any], dict[tuple[str, str], float], float, pyspy.Profile | None]:
    """Run `pan replay` on ``data`` with ``PAN_WIRE=wire``: its JSON summary, CPU seconds per (kind, name) of
    process, wall seconds, and with ``profile_s`` a py-spy profile of the peers. ``decode``: the recorder
    decodes every tuple (``--record-decoded``); ``to_ts``: only the rows up to that ts are fed (``--to``).

    Raises if a process of the run had another ``PAN_WIRE`` (the format would be mixed)."""
    import psutil

    child = common.Child([sys.executable, "-m", "pan", "replay", "--json", str(workflow), "--data", str(data),
                          "--record", str(work / "record"), *(["--record-decoded"] if decode else []),
                          *([] if to_ts is None else ["--to", str(to_ts)])],
                         ready=False, grace_s=30, env=wires.env(wire))
    seen: dict[int, tuple[tuple[str, str], float]] = {}
    wire_of: dict[int, str | None] = {}
    recordings: list[pyspy.Recording] | None = None if profile_s > 0 else []
    started = time.monotonic()
    await child.start()
    producers = asyncio.create_task(producers_registered(workflow)) if profile_s > 0 else None
    try:
        assert child.process is not None and child.process.stdout is not None
        stdout = asyncio.create_task(child.process.stdout.read())  # drained meanwhile: the summary is long
        root = psutil.Process(child.pid)
        while child.process.returncode is None:
            sample(root, seen, wire_of)
            if recordings is None and producers is not None and producers.done() and not producers.exception() \
                    and time.monotonic() - producers.result() >= PROFILE_AFTER_S:
                recordings = await start_profiles(seen, work, profile_s)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SAMPLE_S):
                    await child.process.wait()
        wall_s = time.monotonic() - started
        out, code = await stdout, child.process.returncode
        if code not in (0, 1) or not out.strip():  # 1 = some recorder missed tuples: still a measurement
            raise RuntimeError(f"pan replay exited {code}: {child.stderr_tail()}")
    finally:
        if producers is not None:
            producers.cancel()
            await asyncio.gather(producers, return_exceptions=True)
        await child.stop()
        for recording in recordings or []:
            await recording.wait(timeout_s=profile_s + 30)
    mixed = sorted({seen[pid][0][1] for pid, got in wire_of.items() if got != wire and seen[pid][0][0] != "other"})
    if mixed:
        raise RuntimeError(f"processes without PAN_WIRE={wire}: {', '.join(mixed)}")
    cpu: dict[tuple[str, str], float] = {}
    for key, seconds in seen.values():
        cpu[key] = cpu.get(key, 0.0) + seconds
    profile = None
    if recordings:
        profile = pyspy.Profile()
        for recording in recordings:
            profile.add_file(recording.out)
    return json.loads(out), cpu, wall_s, profile


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


# --- the command ----------------------------------------------------------------------------


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


def run(args: argparse.Namespace) -> int:
    if args.floor_reps < 0 or args.fixed_reps < 0 or args.reps < 1:
        print("pan bench replay: --floor-reps and --fixed-reps must be >= 0 and --reps >= 1", file=sys.stderr)
        return 2
    problem = wires.check_available(args.wires)
    if problem:
        print(f"pan bench replay: {problem}", file=sys.stderr)
        return 2
    source = Path(args.workflow)
    results: dict[str, Any] = {
        **common.run_header("replay"),
        "config": {"workflow": source.name, "match": query_delay.match_text(args), "per_worker": args.per_worker,
                   "pulls": args.pulls, "recorders": args.recorder,
                   "sample_s": SAMPLE_S, "profile_s": args.profile, "wires": args.wires, "reps": args.reps},
        "runs": {},
    }
    digests: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="pan-replay-bench-") as tmp:
        work = Path(tmp)
        data = query_delay.prepare_data(args, work)
        span_s = event_time_s(data)
        layouts = {"by_peer": source}
        if args.pulls:
            layouts = {f"pulls_{mode}": common.with_pulls(source, work / f"pulls_{mode}.json", mode)
                       for mode in args.pulls}
        if args.per_worker:
            layouts["by_worker"] = one_worker_per_peer(source, work / "one_worker_per_peer.json")
        moved: dict[str, Path] = {}
        for layout, workflow in layouts.items():
            (work / layout).mkdir()
            moved[layout] = query_delay.on_free_ports_copy(workflow, work / layout)
        runs_of = variants(args.wires, args.recorder)
        by_run: dict[str, dict[str, list[dict[str, Any]]]] = {
            layout: {name: [] for name, _, _ in runs_of} for layout in layouts}
        for rep in range(args.reps):
            for layout in layouts:  # interleaved: layouts, wires and recorders take turns in every repetition
                numbered = list(enumerate(runs_of))  # the order turned round every repetition: a run leaves
                for n, (name, wire, decode) in numbered if rep % 2 == 0 else numbered[::-1]:  # the load high
                    result = measure(moved[layout], data, work / layout / f"{wire}-{n}-{rep}", span_s, wire,
                                     decode=decode)
                    by_run[layout][name].append(result)
                    digests.add(result["recording_sha256"])
                    print(f"replay {layout} {name} {rep + 1}/{args.reps} ({result['peers']} peers): "
                          f"{result['input_rows']:,} rows in {result['feed_s']:.1f} s = {result['rows_per_s']:,.0f} "
                          f"rows/s ({result['real_time_multiple']}x real time), CPU {result['cpu_total_s']:.1f} s, "
                          f"load {result['load_avg_before'][0]:.2f} -> {result['load_avg_after'][0]:.2f}",
                          file=sys.stderr, flush=True)
        for layout, by_wire in by_run.items():
            entry: dict[str, Any] = {"title": LAYOUT_TITLES[layout],
                                     "wires": {wire: summarize(runs) for wire, runs in by_wire.items()}}
            if "json" in by_wire:  # end to end, each wire's over JSON's (the issue's targets are end to end)
                json_run = entry["wires"]["json"]["end_to_end_rows_per_s_median"]
                entry["over_json"] = {wire: wires.ratio(summary["end_to_end_rows_per_s_median"], json_run)
                                      for wire, summary in entry["wires"].items() if wire != "json"}
            if "json" in by_wire and "json" + DECODING in by_wire:
                lines_run, decoding_run = entry["wires"]["json"], entry["wires"]["json" + DECODING]
                entry["lines_over_decoded"] = {
                    key: wires.ratio(lines_run[key]["median"], decoding_run[key]["median"])
                    for key in ("rows_per_s", "end_to_end_rows_per_s", "driver_cpu_s", "cpu_total_s")}
            if args.fixed_reps > 0 and layout == next(iter(layouts)):
                for wire, summary in entry["wires"].items():
                    fixed = fixed_cost(moved[layout], data, work / layout, summary["runs"][0]["wire"],
                                       args.fixed_reps)
                    summary["fixed"], summary["per_row"] = fixed, per_row_cpu(summary, fixed)
                    print(f"replay {layout} {wire}: without rows CPU {fixed['cpu_total_s']['median']:.1f} s (driver "
                          f"{fixed['driver_cpu_s']['median']:.1f} s); the rows' own: "
                          f"{summary['per_row']['cpu_total_s']:.1f} s, driver's share "
                          f"{summary['per_row']['driver_share']:.0%}", file=sys.stderr, flush=True)
            if args.profile > 0 and layout == next(iter(layouts)):  # extra runs: py-spy slows no measured one
                for wire in args.wires:
                    profiled = measure(moved[layout], data, work / layout / f"{wire}-profile", span_s, wire,
                                       args.profile)
                    entry["wires"][wire]["profile"] = profiled["profile"]
            results["runs"][layout] = entry
        if args.floor_reps > 0:
            results["floor"] = floor_bench.measure(source, data, args.floor_reps)
            floor = results["floor"]["rows_per_s_median"]
            for layout, entry in results["runs"].items():
                for wire, summary in entry["wires"].items():
                    summary["fraction_of_floor"] = round(summary["end_to_end_rows_per_s_median"] / floor, 3)
                    print(f"replay {layout} {wire}: {summary['fraction_of_floor']:.1%} of the floor end to end "
                          f"({floor:,.0f} rows/s, one process, no network)", file=sys.stderr, flush=True)
    results["recordings_identical"] = len(digests) == 1
    results["load_avg_at_end"] = wires.load_avg()
    from benchmarks import plots

    common.publish(results, args.write, SECTION, lambda: report(results),
                   lambda png: plots.replay(plot_runs(results), png))
    return 0


def plot_runs(results: dict[str, Any]) -> dict[str, Any]:
    """One CPU panel per layout and wire (the medians), in the shape `plots.replay` draws."""
    return {"runs": {f"{layout}-{wire}": {"title": f"{entry['title']}, {wire}", "processes": s["processes"],
                                          "cpu_total_s": s["cpu_total_s_median"], "rows_per_s": s["rows_per_s_median"]}
                     for layout, entry in results["runs"].items() for wire, s in entry["wires"].items()}}


# --- the report -----------------------------------------------------------------------------


def spread_cell(s: dict[str, float], digits: int = 1) -> str:
    return f"{common.fmt(s['min'], digits)} - {common.fmt(s['max'], digits)}"


def report(results: dict[str, Any]) -> str:
    runs = results["runs"]
    config = results["config"]
    wire_names = config["wires"]
    rows = []
    for entry in runs.values():
        for wire, s in entry["wires"].items():
            ratio = entry.get("over_json", {}).get(wire)
            rows.append([entry["title"], s["peers"], wire, s["reps"], common.fmt(s["input_rows"]),
                         f"{s['feed_s']['median']:.1f} s", common.fmt(s["rows_per_s"]["median"]),
                         spread_cell(s["rows_per_s"], 0),
                         f"{common.fmt(s['end_to_end_rows_per_s']['median'])} "
                         f"({spread_cell(s['end_to_end_rows_per_s'], 0)})",
                         f"{ratio:.2f}" if ratio is not None else "",
                         f"{s['real_time_multiple']['median']:.2f}x",
                         "met" if s["target_met"] else "**missed**", f"{s['cpu_total_s']['median']:.1f} s",
                         f"{s['driver_cpu_s']['median']:.1f} s", f"{s['wall_s']['median']:.1f} s"])
    loads_before = [r["load_avg_before"][0] for e in runs.values() for s in e["wires"].values() for r in s["runs"]]
    loads_after = [r["load_avg_after"][0] for e in runs.values() for s in e["wires"].values() for r in s["runs"]]
    event_s = next(iter(next(iter(runs.values()))["wires"].values()))["event_time_s"]
    lines = [
        "## Full-game replay throughput, JSON and Arrow pages (issues 5 and 13)",
        "",
        f"{results['date']}. {common.machine_line(results['machine'], results['load_avg_at_end'])}",
        f"Command: `{results['command']}`; workflow `{config['workflow']}`, {config['match']} "
        f"({event_s:.1f} s of event time), `pan replay` unpaced (speedup 0, sensors in lockstep), every output "
        "stream recorded, all processes on this machine.",
        f"Wire formats {', '.join(wire_names)}: {config['reps']} run(s) each, alternating, with `PAN_WIRE` set for "
        "every process of the run (checked: the replay driver with its recorder, the launcher, the repository and "
        "every peer). Load average (1 min) before each run: "
        f"{min(loads_before):.2f} - {max(loads_before):.2f}, after: {min(loads_after):.2f} - {max(loads_after):.2f}.",
        "",
        "Rows/s = input rows sent / feed time (the simulator's run); multiple of real time = event-time span of "
        f"the data / feed time; medians over the runs, rows/s with min - max. Target (issue 5): "
        f"{TARGET_ROWS_PER_S:,} rows/s, 10x real time, judged end to end. CPU = user + system seconds of every "
        "process of the replay, "
        f"sampled every {SAMPLE_S:g} s with psutil over the whole run (start-up, feed, and the quiet period after "
        "the data before the replay stops: the wall time); driver = the simulator and the recorder. End to end = "
        "input rows / the time from the first row fed until every output stream had ended and was recorded: the "
        "feed may run ahead of the workflow, whose ingest buffers what it has not processed yet.",
        "",
        common.markdown_table(["Processes", "Peers", "Wire", "Runs", "Input rows", "Feed time", "Rows/s",
                               "Min - max", "Rows/s end to end (min - max)", "End to end / JSON",
                               "Multiple of real time",
                               f"Target {TARGET_ROWS_PER_S:,} rows/s", "CPU total", "Driver CPU", "Wall time"],
                              rows, align="lrlrrrrrrrrlrrr"),
        "",
        "Every run recorded the same bytes (sha256 over all output streams), over either format: "
        + ("**yes**." if results["recordings_identical"] else "**no**: the outputs differ between runs."),
    ]
    for entry in runs.values():
        summaries = entry["wires"]
        first = next(iter(summaries.values()))
        cpu_rows = []
        for n, p in enumerate(first["processes"]):
            cells = [p["process"], ", ".join(p["workers"]) or "-"]
            for s in summaries.values():
                cpu = s["processes"][n]["cpu_s"]
                cells += [f"{cpu:.1f}", f"{cpu / (s['cpu_total_s_median'] or float('nan')):.0%}"]
            cpu_rows.append(cells)
        header = ["Process", "Workers"]
        for wire in summaries:
            header += [f"CPU s {wire}", f"Share {wire}"]
        lines += ["", f"CPU per process, {entry['title']} ({first['peers']} peers), medians over the runs:", "",
                  common.markdown_table(header, cpu_rows, align="ll" + "rr" * len(summaries))]
    fixed_rows = [[entry["title"], wire, s["fixed"]["runs"], f"{s['fixed']['cpu_total_s']['median']:.1f} s",
                   f"{s['fixed']['driver_cpu_s']['median']:.1f} s", f"{s['per_row']['cpu_total_s']:.1f} s",
                   f"{s['per_row']['driver_cpu_s']:.1f} s", f"{s['per_row']['driver_share']:.0%}"]
                  for entry in runs.values() for wire, s in entry["wires"].items() if "fixed" in s]
    if fixed_rows:
        lines += ["", "What a replay costs without a row (the same command with `--to` before the first row: every "
                  "process starts, the recorder subscribes to every output, every input ends at once, the ends are "
                  "recorded, everything stops), and what is left to the rows: the medians above less it.", "",
                  common.markdown_table(["Processes", "Wire", "Runs without rows", "CPU without rows",
                                         "Driver without rows", "CPU of the rows", "Driver CPU of the rows",
                                         "Driver's share of the rows' CPU"], fixed_rows, align="llrrrrrr")]
    if "floor" in results:
        floor = results["floor"]
        parts = [f"{s['fraction_of_floor']:.0%} of it {e['title']} over {wire}"
                 for e in runs.values() for wire, s in e["wires"].items()]
        lines += ["", f"Floor (`pan bench floor` on the same data, {len(floor['runs'])} runs: every component in one "
                  f"process, no network): {common.fmt(floor['rows_per_s_median'])} rows/s median "
                  f"({common.fmt(floor['rows_per_s_min'])} - {common.fmt(floor['rows_per_s_max'])}); the replay "
                  "reaches, end to end, " + ", ".join(parts) + "."]
    lines += [
        "",
        "The replay driver is the simulator plus the recorder (one subscriber per output stream; over JSON it reads "
        "line pages and writes each tuple's bytes as they come, over Arrow it decodes each page and writes every "
        "tuple as a JSON line); the launcher only watches its children.",
    ]
    for entry in runs.values():
        ratios = entry.get("lines_over_decoded")
        if ratios:
            lines += ["", f"{entry['title']}: the recorder writing line pages' bytes against decoding every tuple "
                      f"and encoding it again (`--recorder lines,decoded`), medians: rows/s {ratios['rows_per_s']}x, "
                      f"end to end {ratios['end_to_end_rows_per_s']}x, driver CPU {ratios['driver_cpu_s']}x, "
                      f"CPU total {ratios['cpu_total_s']}x."]
    if {"pulls_batched", "pulls_per_stream"} <= set(runs) and "json" in runs["pulls_batched"]["wires"]:
        batched, per_stream = (runs[layout]["wires"]["json"]["rows_per_s_median"]
                               for layout in ("pulls_batched", "pulls_per_stream"))
        lines += ["", "Batched pulls (a worker's pages of one publisher asked for in one loop round share a "
                  "`POST /pages`) against one `/data` "
                  f"long poll per input, JSON rows/s medians: {batched / per_stream:.2f}x. Over Arrow both pull per "
                  "stream (a batched answer is JSON), so their Arrow rows differ only by chance."]
    if "by_worker" in runs:
        lines.append("With one worker per process the totals differ from the workflow's own layout: workers of one "
                     "peer pull from each other in-process (`pan/input/local.py`), whereas one worker per process "
                     "pulls "
                     "every input over HTTP, so that run does more work (and has more processes to share "
                     f"{results['machine']['cores']} cores).")
    for entry in runs.values():
        for wire, s in entry["wires"].items():
            if s.get("profile"):
                lines += ["", f"Profile over {wire} (a run of its own after the measured ones):", "",
                          *profile_report(s["profile"])]
    lines += ["", common.image_link(SECTION, "CPU seconds per process")]
    return "\n".join(lines)


def profile_report(profile: dict[str, Any]) -> list[str]:
    areas = [[f"`{a['frame']}`", a["what"], f"{a['share']:.0%}"] for a in profile["areas"]]
    functions = [[f"`{f['function']}`", f"{f['share']:.1%}"] for f in profile["self"]]
    return [
        f"Where the peers' time goes: py-spy (`--nonblocking`, {profile['rate_hz']} Hz) on every peer for "
        f"{profile['seconds']:g} s from {PROFILE_AFTER_S:g} s into the replay, {profile['samples']:,} samples pooled "
        "over the peers (this run's command includes `--profile`). An area's share counts the samples with its frame "
        "anywhere on the stack; in-process pulls serve their page inside `InputChannel.pull`, so areas can overlap.",
        "",
        common.markdown_table(["Frame", "Work", "Share of samples"], areas, align="llr"),
        "",
        "Functions with the most self time (the innermost frame; C calls such as orjson's count in their caller):",
        "",
        common.markdown_table(["Function", "Share of samples"], functions, align="lr"),
    ]
