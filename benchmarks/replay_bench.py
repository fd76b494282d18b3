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

``--per-worker`` also replays the same data into a variant of the workflow
with every worker on its own peer, so CPU per process = CPU per worker.  That
is not the same work: workers of one peer pull from each other in-process
(`pan/local.py`), one worker per process pulls everything over HTTP.
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
from typing import TYPE_CHECKING, Any

from benchmarks import common, floor_bench, pyspy, query_delay
from pan import eventloop

if TYPE_CHECKING:
    import psutil

HELP = "fast (unpaced) replay throughput of the full-game workflow, with CPU per process (and per worker)"
SECTION = "replay-throughput"
SAMPLE_S = 0.5
TARGET_ROWS_PER_S = 150_000  # issue 5: 10x real time on the 2-core machine
PS = 10**12
KINDS = {"replay": ("driver", "replay driver"), "run": ("launcher", "launcher (pan run)"),
         "repository": ("repository", "repository")}  # `pan COMMAND` -> (kind, name)
LAYOUT_TITLES = {"by_peer": "as in the workflow", "by_worker": "one worker per process"}
PROFILE_AFTER_S = 8.0  # py-spy attaches once start-up (Java-free, ~3 s) is over and the feed runs
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
    p.add_argument("--profile", type=float, default=0.0, metavar="SECONDS",
                   help=f"sample every peer with py-spy for SECONDS, starting {PROFILE_AFTER_S:g} s into the "
                        "replay (as in the workflow only), and report where the time goes")
    p.add_argument("--floor-reps", type=int, default=3, metavar="N",
                   help="also run `pan bench floor` N times on the same data and report each replay's rows/s as a "
                        "fraction of its median (0: not)")
    query_delay.add_replay_arguments(p, "20 s of match, no Spark")


# --- workflows ----------------------------------------------------------------------------


def one_worker_per_peer(source: Path, out: Path) -> Path:
    """``source`` with every worker on its own peer (named after the worker), written to ``out``."""
    data = json.loads(Path(source).read_text())
    data["workers"] = [{**worker, "peer": worker["name"]} for worker in data["workers"]]
    out.write_text(json.dumps(data))
    return out


def workers_by_peer(workflow: Path) -> dict[str, list[str]]:
    """Peer -> names of the workers it hosts, in workflow order."""
    from pan.workflow import load_workflow

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


def sample(root: psutil.Process, seen: dict[int, tuple[tuple[str, str], float]]) -> None:
    """Record ((kind, name), CPU seconds so far) of ``root`` and every descendant; a process's last sample wins."""
    import psutil

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


async def replay_with_cpu(
    workflow: Path, data: Path, work: Path, profile_s: float = 0.0
) -> tuple[dict[str, Any], dict[tuple[str, str], float], float, pyspy.Profile | None]:
    """Run `pan replay` on ``data``: its JSON summary, CPU seconds per (kind, name) of process, wall seconds,
    and with ``profile_s`` a py-spy profile of the peers."""
    import psutil

    child = common.Child([sys.executable, "-m", "pan", "replay", str(workflow), "--data", str(data),
                          "--record", str(work / "record")], ready=False, grace_s=30)
    seen: dict[int, tuple[tuple[str, str], float]] = {}
    recordings: list[pyspy.Recording] | None = None if profile_s > 0 else []
    started = time.monotonic()
    await child.start()
    try:
        assert child.process is not None and child.process.stdout is not None
        stdout = asyncio.create_task(child.process.stdout.read())  # drained meanwhile: the summary is long
        root = psutil.Process(child.pid)
        while child.process.returncode is None:
            sample(root, seen)
            if recordings is None and time.monotonic() - started >= PROFILE_AFTER_S:
                recordings = await start_profiles(seen, work, profile_s)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SAMPLE_S):
                    await child.process.wait()
        wall_s = time.monotonic() - started
        out, code = await stdout, child.process.returncode
        if code not in (0, 1) or not out.strip():  # 1 = some recorder missed tuples: still a measurement
            raise RuntimeError(f"pan replay exited {code}: {child.stderr_tail()}")
    finally:
        await child.stop()
        for recording in recordings or []:
            await recording.wait(timeout_s=profile_s + 30)
    cpu: dict[tuple[str, str], float] = {}
    for key, seconds in seen.values():
        cpu[key] = cpu.get(key, 0.0) + seconds
    profile = None
    if recordings:
        profile = pyspy.Profile()
        for recording in recordings:
            profile.add_file(recording.out)
    return json.loads(out), cpu, wall_s, profile


def measure(workflow: Path, data: Path, work: Path, span_s: float, profile_s: float = 0.0) -> dict[str, Any]:
    """One replay of ``workflow``: throughput, multiple of real time, CPU per process (and a profile)."""
    summary, cpu, wall_s, profile = eventloop.run(replay_with_cpu(workflow, data, work, profile_s))
    hosted = workers_by_peer(workflow)
    order = [*KINDS.values(), *(("peer", p) for p in hosted)]
    processes = [{"process": name, "kind": kind, "workers": hosted.get(name, []) if kind == "peer" else [],
                  "cpu_s": round(cpu.get((kind, name), 0.0), 2)}
                 for kind, name in order + sorted(set(cpu) - set(order))]
    feed_s = summary["feed_s"]
    rows_per_s = summary["sent"] / feed_s if feed_s > 0 else float("nan")
    return {
        "peers": len(hosted),
        "input_rows": summary["sent"],
        "event_time_s": round(span_s, 3),
        "feed_s": feed_s,
        "elapsed_s": summary["elapsed_s"],
        "wall_s": round(wall_s, 3),
        "rows_per_s": round(rows_per_s, 1),
        "real_time_multiple": round(span_s / feed_s, 3) if feed_s > 0 else None,
        "target_rows_per_s": TARGET_ROWS_PER_S,
        "target_met": rows_per_s >= TARGET_ROWS_PER_S,
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


def run(args: argparse.Namespace) -> int:
    if args.floor_reps < 0:
        print("pan bench replay: --floor-reps must be >= 0", file=sys.stderr)
        return 2
    source = Path(args.workflow)
    results: dict[str, Any] = {
        **common.run_header("replay"),
        "config": {"workflow": source.name, "match": query_delay.match_text(args), "per_worker": args.per_worker,
                   "sample_s": SAMPLE_S, "profile_s": args.profile},
        "runs": {},
    }
    with tempfile.TemporaryDirectory(prefix="pan-replay-bench-") as tmp:
        work = Path(tmp)
        data = query_delay.prepare_data(args, work)
        span_s = event_time_s(data)
        layouts = {"by_peer": source}
        if args.per_worker:
            layouts["by_worker"] = one_worker_per_peer(source, work / "one_worker_per_peer.json")
        for layout, workflow in layouts.items():
            run_dir = work / layout
            run_dir.mkdir()
            profile_s = args.profile if layout == "by_peer" else 0.0
            result = measure(query_delay.on_free_ports_copy(workflow, run_dir), data, run_dir, span_s, profile_s)
            results["runs"][layout] = {"title": LAYOUT_TITLES[layout], **result}
            print(f"replay {layout} ({result['peers']} peers): {result['input_rows']:,} rows in "
                  f"{result['feed_s']:.1f} s = {result['rows_per_s']:,.0f} rows/s "
                  f"({result['real_time_multiple']}x real time), CPU {result['cpu_total_s']:.1f} s",
                  file=sys.stderr, flush=True)
        if args.floor_reps > 0:
            results["floor"] = floor_bench.measure(source, data, args.floor_reps)
            for layout, result in results["runs"].items():
                result["fraction_of_floor"] = round(result["rows_per_s"] / results["floor"]["rows_per_s_median"], 3)
                print(f"replay {layout}: {result['fraction_of_floor']:.1%} of the floor "
                      f"({results['floor']['rows_per_s_median']:,.0f} rows/s, one process, no network)",
                      file=sys.stderr, flush=True)
    results["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    from benchmarks import plots

    common.publish(results, args.write, SECTION, lambda: report(results), lambda png: plots.replay(results, png))
    return 0


# --- the report -----------------------------------------------------------------------------


def report(results: dict[str, Any]) -> str:
    runs = results["runs"]
    rows = [[r["title"], r["peers"], common.fmt(r["input_rows"]), f"{r['event_time_s']:.1f} s",
             f"{r['feed_s']:.1f} s", common.fmt(r["rows_per_s"]), f"{r['real_time_multiple']:.2f}x",
             "met" if r["target_met"] else "**missed**", f"{r['cpu_total_s']:.1f} s", f"{r['wall_s']:.1f} s"]
            for r in runs.values()]
    lines = [
        "## Full-game replay throughput (issue 5)",
        "",
        f"{results['date']}. {common.machine_line(results['machine'], results['load_avg_at_end'])}",
        f"Command: `{results['command']}`; workflow `{results['config']['workflow']}`, "
        f"{results['config']['match']}, `pan replay` unpaced (speedup 0, sensors in lockstep), every output "
        "stream recorded, all processes on this machine.",
        "",
        "Rows/s = input rows sent / feed time (the simulator's run); multiple of real time = event-time span of "
        f"the data / feed time. Target (issue 5): {TARGET_ROWS_PER_S:,} rows/s, 10x real time. CPU = user + "
        f"system seconds of every process of the replay, sampled every {SAMPLE_S:g} s with psutil over the whole "
        "run (start-up, feed, and the quiet period after the data before the replay stops: the wall time).",
        "",
        common.markdown_table(["Processes", "Peers", "Input rows", "Event time", "Feed time", "Rows/s",
                               "Multiple of real time", f"Target {TARGET_ROWS_PER_S:,} rows/s", "CPU total",
                               "Wall time"], rows, align="lrrrrrrlrr"),
    ]
    for r in runs.values():
        total = r["cpu_total_s"] or float("nan")
        cpu_rows = [[p["process"], ", ".join(p["workers"]) or "-", f"{p['cpu_s']:.1f}", f"{p['cpu_s'] / total:.0%}",
                     f"{p['cpu_s'] / r['wall_s']:.2f}"] for p in r["processes"]]
        lines += ["", f"CPU per process, {r['title']} ({r['peers']} peers):", "",
                  common.markdown_table(["Process", "Workers", "CPU s", "Share", "Cores (avg over wall time)"],
                                        cpu_rows, align="llrrr")]
    if "floor" in results:
        floor = results["floor"]
        lines += ["", f"Floor (`pan bench floor` on the same data, {len(floor['runs'])} runs: every component in one "
                  f"process, no network): {common.fmt(floor['rows_per_s_median'])} rows/s median "
                  f"({common.fmt(floor['rows_per_s_min'])} - {common.fmt(floor['rows_per_s_max'])}); the replay "
                  "reaches " + ", ".join(f"{r['fraction_of_floor']:.0%} of it {r['title']}" for r in runs.values())
                  + "."]
    lines += [
        "",
        "The replay driver is the simulator plus the recorder (one subscriber per output stream, parsing and "
        "re-encoding every tuple); the launcher only watches its children.",
    ]
    if "by_worker" in runs:
        lines.append("With one worker per process the totals differ from the workflow's own layout: workers of one "
                     "peer pull from each other in-process (`pan/local.py`), whereas one worker per process pulls "
                     "every input over HTTP, so that run does more work (and has more processes to share "
                     f"{results['machine']['cores']} cores).")
    for r in runs.values():
        if r.get("profile"):
            lines += ["", *profile_report(r["profile"])]
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
