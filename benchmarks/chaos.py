"""`pan bench chaos`: a full-game replay under a seeded schedule of faults, checked against an undisturbed run.

The workflow is the shipped 3-peer full game plus two peers of level-1
repeaters of some leaf output streams (`chaos_workflow.chaos_workflow`). The
repository and every peer run as processes of their own (not under `pan run`,
whose children cannot be restarted one by one); the simulator feeds the data
(`pan simulate`, in real time by default) and two recording processes
subscribe to every output stream, picking publishers at random through the
repository as any client does, so some streams come through the repeaters.

First an undisturbed reference run, then per seed the same data on the same
workflow while faults hit the processes one after the other:

* **pause**: SIGSTOP, then SIGCONT after a seeded duration, of any process
  (producing peers only briefly: see ``chaos_schedule.PRODUCER_PAUSE_S``);
* **restart**: SIGKILL, then a new process with the same command line, of
  the repository or a repeater peer;
* **drop**: every established TCP connection to or from the process's HTTP
  ports aborted at once (`ss -K`; needs root, otherwise left out);
* **stall**: SIGSTOP, then SIGCONT, of the consumer: the producer of some leaf
  streams keeps a tight buffer (``chaos_workflow.TIGHT_WORKERS``), and those
  streams are recorded by a process of their own (light enough to keep up
  when undisturbed), which loses tuples it must report as missed.

After each fault ends every process's ``/health`` latency is measured. Each
recorded stream is compared with the reference: tuples lost, duplicated,
changed, and missed as reported by the subscriber. The checks, per seed: no
hang (the run ends within its bound), every process answers ``/health`` within
``HEALTH_BOUND_S`` after each fault, no duplicate, no changed tuple, no loss
outside a reported gap, and every stream without a reported gap identical to
the reference (apart from the tight ones, the buffers hold the whole match,
so they cover every outage).
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

from benchmarks import common, query_delay
from benchmarks.chaos_cluster import GRACE_S, HEALTH_BOUND_S, START_TIMEOUT_S, Cluster
from benchmarks.chaos_compare import compare, totals
from benchmarks.chaos_faults import drop_supported, max_health, run_schedule
from benchmarks.chaos_recorder import CONSUMER, MAX_DRAIN_S
from benchmarks.chaos_schedule import OTHER_PAUSE_S, PRODUCER_PAUSE_S, RESTART_DOWN_S, STALL_S, Fault, make_schedule
from benchmarks.chaos_workflow import (
    COVERING_BUFFER,
    DEFAULT_REPEATED,
    REPEATER_PEERS,
    TIGHT_BUFFER,
    TIGHT_WORKERS,
    chaos_workflow,
)
from pan.util import eventloop

HELP = "fault injection (pause, kill-and-restart, dropped connections, stalled consumer) during a full-game replay"
SECTION = "chaos"
DEFAULT_SEEDS = "1,2,3"
DEFAULT_FAULTS = 8
QUICK_FAULTS = 4
WINDOW_SHARE = 0.7  # faults are planned over this share of the reference run's feed time
REFERENCE_BOUND_S = 1800.0  # the undisturbed run ends within this, or it counts as a hang
HANG_FACTOR = 4.0  # a disturbed run ends within this many times the reference's wall time ...
MIN_BOUND_S = 300.0  # ... and never less than this
FEED_GRACE_S = 60.0  # the recorder's drain answer arrives within MAX_DRAIN_S plus this
DEFAULT_SPEEDUP = 1.0  # real time: the load the workflow is built for (unpaced, 2 cores starve every event loop)
RECORDER = "recorder"  # records every stream but the tight ones; never faulted
CONTROL_PROBE_S = 2.0  # the reference run probes every process's /health this often: latency without faults


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workflow", default=str(common.REPO_ROOT / "workflows" / "full_game_3_peers.json"))
    p.add_argument("--seeds", default=DEFAULT_SEEDS,
                   help=f"comma-separated fault schedule seeds (default {DEFAULT_SEEDS})")
    p.add_argument("--faults", type=int,
                   help=f"faults per seed (default {DEFAULT_FAULTS}, {QUICK_FAULTS} with --quick)")
    p.add_argument("--keep", type=Path, metavar="DIR", help="keep recordings and process logs in DIR")
    p.add_argument("--speedup", type=float, default=DEFAULT_SPEEDUP,
                   help=f"event-time factor of the feed; 0 = unpaced (default {DEFAULT_SPEEDUP:g}: real time)")
    p.add_argument("--health-bound", type=float, default=HEALTH_BOUND_S, metavar="S",
                   help=f"every process must answer /health this soon after each fault "
                   f"(default {HEALTH_BOUND_S:g}; tests on a loaded machine pass a larger one)")
    query_delay.add_replay_arguments(p, f"20 s of match, split without Spark, {QUICK_FAULTS} faults per seed")


# --- one run --------------------------------------------------------------------------------


async def run_once(
    workflow: Path, data: Path, out: Path, faults: list[Fault], bound_s: float, speedup: float
) -> dict[str, Any]:
    """Start the cluster, record, feed ``data``, apply ``faults`` meanwhile, drain and stop.

    Without faults (the reference) every process's /health is probed every
    ``CONTROL_PROBE_S`` instead: the latencies the faults are weighed against.
    """
    cluster = Cluster(workflow, out / "logs")
    streams = output_streams(cluster)
    repeated = sorted({s for spec in cluster.workflow.workers if spec.type == "repeater" for s in spec.inputs})
    recorders = {name: common.Child(
        [sys.executable, "-m", "benchmarks.chaos_recorder", "record", str(workflow), str(out / "record"), "--name",
         name, *(["--tight"] if name == CONSUMER else [])],
        stdin=True, startup_s=START_TIMEOUT_S, grace_s=GRACE_S) for name in (RECORDER, CONSUMER)}
    feeder = common.Child([sys.executable, "-m", "pan", "simulate", "--workflow", str(workflow), "--data", str(data),
                           "--speedup", f"{speedup:g}", "--quiet"], ready=False, grace_s=GRACE_S)
    result: dict[str, Any] = {"hang": None, "faults": [], "feed": {}, "recorder_quiet": False}
    chaos: asyncio.Task[list[dict[str, Any]]] | None = None
    started = time.monotonic()
    try:
        async with asyncio.timeout(bound_s):
            await cluster.start()
            await cluster.wait_registered(streams, repeated)
            for name, recorder in recorders.items():
                await recorder.start()
                cluster.outside[name] = recorder.pid
            await feeder.start()
            t0 = time.monotonic()
            work = run_schedule(faults, cluster, t0) if faults else control_probes(cluster, t0, feeder)
            chaos = asyncio.create_task(work, name="chaos")
            assert feeder.process is not None and feeder.process.stdout is not None
            feed_out = await feeder.process.stdout.read()
            await feeder.process.wait()
            result["feed_s"] = round(time.monotonic() - t0, 3)
            result["feed"] = feed_summary(feed_out, feeder.process.returncode, feeder.stderr_tail())
            if faults:
                result["faults"] = await chaos
            else:
                result["control_health_s"] = [p["max_s"] for p in await chaos]
            for recorder in recorders.values():
                await recorder.send(b"drain")
            answers = [await r.readline(MAX_DRAIN_S + FEED_GRACE_S) for r in recorders.values()]
            result["recorder_quiet"] = all(answer.strip() == b"done" for answer in answers)
        result["hang"] = False
    except TimeoutError:
        result["hang"] = True
    finally:
        if chaos is not None and not chaos.done():
            chaos.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await chaos
        await feeder.stop()
        for recorder in recorders.values():
            await recorder.stop()
        result["exits"] = await cluster.stop()
        result["crashed"] = cluster.crashed
    result["wall_s"] = round(time.monotonic() - started, 3)
    summaries = [out / "record" / f"{name}.json" for name in recorders]
    result["recorded"] = None
    if all(path.exists() for path in summaries):
        parts_ = [json.loads(path.read_text()) for path in summaries]
        result["recorded"] = {"quiet": all(p["quiet"] for p in parts_),
                              "streams": {k: v for p in parts_ for k, v in p["streams"].items()}}
    return result


async def control_probes(cluster: Cluster, t0: float, feeder: common.Child) -> list[dict[str, Any]]:
    """While the feed runs: every ``CONTROL_PROBE_S``, how long until every process answered /health."""
    probes = []
    while feeder.process is not None and feeder.process.returncode is None:
        since = time.monotonic()
        health = await cluster.health_all(since)
        values = list(health.values())
        probes.append({"at_s": round(since - t0, 3), "max_s": None if None in values else max(values)})
        await asyncio.sleep(max(0.0, since + CONTROL_PROBE_S - time.monotonic()))
    return probes


def output_streams(cluster: Cluster) -> list[str]:
    from simulator.replay import output_streams as streams_of

    return streams_of(cluster.workflow)


def feed_summary(stdout: bytes, code: int | None, stderr: str) -> dict[str, Any]:
    """The simulator's totals (rows sent, errors), or why there are none."""
    try:
        summary = json.loads(stdout)
    except ValueError:
        return {"exit": code, "error": stderr[-500:]}
    return {"exit": code, "sent": sum(s.get("sent", 0) for s in summary.get("streams", {}).values()),
            "lost": sum(s.get("lost", 0) for s in summary.get("streams", {}).values()),
            "errors": summary.get("errors", [])}


# --- a seed: schedule, run, checks ------------------------------------------------------------


def fault_targets(cluster_workflow: Path, drop: bool) -> tuple[dict[str, list[str]], frozenset[str]]:
    """Kind -> processes it may hit, and the producing peers (short pauses only)."""
    from pan.workflow.parser import load_workflow

    peers = list(load_workflow(cluster_workflow).peers())
    repeaters = [p for p in peers if p in REPEATER_PEERS]
    producers = frozenset(p for p in peers if p not in REPEATER_PEERS)
    everyone = ["repository", *peers]
    targets = {"pause": everyone, "restart": ["repository", *repeaters], "drop": everyone if drop else [],
               "stall": [CONSUMER]}
    return targets, producers


def checks(
    run: dict[str, Any], streams: dict[str, dict[str, int]], reference: dict[str, Any], health_bound_s: float
) -> dict[str, bool]:
    """The acceptance checks of one disturbed run (and that its reference missed nothing)."""
    health = [v for fault in run["faults"] for v in fault["health_s"].values()]
    no_gap = [row for row in streams.values() if not row["reported"] and not row["resets"]]
    return {
        "reference_complete": not any(s["reported_missed"] for s in reference["recorded"]["streams"].values()),
        "no_hang": run["hang"] is False and run["recorder_quiet"],
        "no_crash": not run["crashed"],
        "feed_complete": run["feed"].get("sent") == reference["feed"].get("sent") and not run["feed"].get("errors"),
        "health_within_bound": all(v is not None and v <= health_bound_s for v in health),
        "no_duplicate": all(row["duplicated"] == 0 for row in streams.values()),
        "no_changed_tuple": all(row["changed"] == 0 and row["extra"] == 0 for row in streams.values()),
        "no_unreported_loss": all(row["unreported"] == 0 and row["unexplained_jumps"] == 0 for row in streams.values()),
        "identical_where_covered": all(row["identical"] for row in no_gap),
    }


def seed_result(
    seed: int, run: dict[str, Any], reference: dict[str, Any], ref_dir: Path, run_dir: Path, health_bound_s: float
) -> dict[str, Any]:
    streams = compare(ref_dir / "record", run_dir / "record", run["recorded"]) if run["recorded"] else {}
    health = [v for fault in run["faults"] for v in fault["health_s"].values()]
    return {
        "seed": seed,
        "checks": checks(run, streams, reference, health_bound_s) if streams else {"recorded": False},
        "faults": run["faults"],
        "health_max_s": max((v for v in health if v is not None), default=None),
        "health_unanswered": sum(1 for v in health if v is None),
        "feed_s": run.get("feed_s"),
        "wall_s": run["wall_s"],
        "hang": run["hang"],
        "crashed": run["crashed"],
        "totals": totals(streams) if streams else {},
        # per stream only where something happened: lost / duplicated / reported / changed / resets
        "streams": {name: row for name, row in streams.items()
                    if not row["identical"] or row["reported"] or row["resets"]},
    }


# --- the command ----------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    seeds = [int(s) for s in str(args.seeds).split(",") if s.strip()]
    count = args.faults if args.faults is not None else (QUICK_FAULTS if args.quick else DEFAULT_FAULTS)
    with contextlib.ExitStack() as stack:
        work = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pan-chaos-")))
        work.mkdir(parents=True, exist_ok=True)
        results = measure(Path(args.workflow), query_delay.prepare_data(args, work), work, seeds, count,
                          speedup=args.speedup, match=query_delay.match_text(args), health_bound_s=args.health_bound)
    from benchmarks import plots

    common.publish(results, args.write, SECTION, lambda: report(results), lambda png: plots.chaos(results, png))
    return 0 if results["passed"] else 1


def measure(
    source: Path, data: Path, work: Path, seeds: list[int], count: int, *, speedup: float = DEFAULT_SPEEDUP,
    match: str = "", health_bound_s: float = HEALTH_BOUND_S,
) -> dict[str, Any]:
    """The reference run, then one disturbed run per seed; the whole results object."""
    try:
        return eventloop.run(_measure(source, data, work, seeds, count, speedup, match, health_bound_s))
    finally:
        common.kill_leftovers()


async def _measure(
    source: Path, data: Path, work: Path, seeds: list[int], count: int, speedup: float, match: str,
    health_bound_s: float,
) -> dict[str, Any]:
    workflow = chaos_workflow(source, work / "chaos-workflow.json")
    drop = drop_supported()
    targets, producers = fault_targets(workflow, drop)
    results: dict[str, Any] = {
        **common.run_header(SECTION),
        "config": {"workflow": Path(source).name, "match": match, "speedup": speedup, "seeds": seeds,
                   "faults_per_seed": count,
                   "repeated_streams": list(DEFAULT_REPEATED), "repeater_peers": list(REPEATER_PEERS),
                   "targets": targets, "drop": "ss -K" if drop else "unavailable (needs root and ss)",
                   "health_bound_s": health_bound_s, "producer_pause_s": list(PRODUCER_PAUSE_S),
                   "other_pause_s": list(OTHER_PAUSE_S), "restart_down_s": list(RESTART_DOWN_S),
                   "stall_s": list(STALL_S), "covering_buffer": COVERING_BUFFER,
                   "tight_workers": list(TIGHT_WORKERS), "tight_buffer": TIGHT_BUFFER},
    }
    print("chaos: reference run", file=sys.stderr, flush=True)
    reference = await run_once(workflow, data, work / "reference", [], REFERENCE_BOUND_S, speedup)
    if reference["hang"] or not reference["recorded"] or reference["feed"].get("exit") != 0:
        raise RuntimeError(f"the undisturbed reference run failed: hang={reference['hang']}, feed={reference['feed']}")
    results["reference"] = {"feed_s": reference["feed_s"], "wall_s": reference["wall_s"],
                            "sent": reference["feed"]["sent"], "crashed": reference["crashed"],
                            "tuples": sum(s["received"] for s in reference["recorded"]["streams"].values()),
                            "streams": len(reference["recorded"]["streams"]),
                            "control_health": control_summary(reference.get("control_health_s", [])),
                            "missed": sum(s["reported_missed"] for s in reference["recorded"]["streams"].values())}
    bound = max(MIN_BOUND_S, HANG_FACTOR * reference["wall_s"])
    window = WINDOW_SHARE * reference["feed_s"]
    results["config"].update(window_s=round(window, 1), bound_s=round(bound, 1))
    results["seeds"] = []
    for seed in seeds:
        faults = make_schedule(seed, targets, window, count, producers)
        print(f"chaos: seed {seed}: {len(faults)} faults", file=sys.stderr, flush=True)
        run_dir = work / f"seed-{seed}"
        disturbed = await run_once(workflow, data, run_dir, faults, bound, speedup)
        results["seeds"].append(seed_result(seed, disturbed, reference, work / "reference", run_dir, health_bound_s))
    results["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    results["passed"] = all(all(s["checks"].values()) for s in results["seeds"])
    return results


def control_summary(latencies: list[float | None]) -> dict[str, Any]:
    """Probes of the undisturbed run: how many, median and slowest answer, and how many got none."""
    answered = [v for v in latencies if v is not None]
    return {"probes": len(latencies), "p50_s": round(common.median(answered), 3) if answered else None,
            "max_s": max(answered, default=None), "unanswered": len(latencies) - len(answered)}


# --- the report -----------------------------------------------------------------------------


def restart_cell(fault: dict[str, Any]) -> str:
    if "restart_s" not in fault:
        return "-"
    return "**never**" if fault["restart_s"] is None else f"{fault['restart_s']:.2f}"


def feed_text(speedup: float) -> str:
    return "fed unpaced" if speedup == 0 else "fed in real time" if speedup == 1 else f"fed at {speedup:g}x real time"


def control_text(control: dict[str, Any]) -> str:
    if not control["probes"]:
        return ""
    return (f"/health of every process, probed {control['probes']} times during that feed without faults: median "
            f"{control['p50_s']:.3f} s, slowest {control['max_s']:.3f} s, {control['unanswered']} unanswered.")


def report(results: dict[str, Any]) -> str:
    config, ref = results["config"], results["reference"]
    rows = []
    for s in results["seeds"]:
        t = s["totals"]
        kinds = ", ".join(f"{f['kind']} {f['target']}" for f in s["faults"])
        rows.append([s["seed"], kinds, f"{s['health_max_s']:.2f} s" if s["health_max_s"] is not None else "-",
                     s["health_unanswered"], f"{t.get('identical', 0)} / {t.get('streams', 0)}",
                     common.fmt(t.get("lost")), common.fmt(t.get("reported")), common.fmt(t.get("unreported")),
                     common.fmt(t.get("duplicated")), common.fmt(t.get("changed")),
                     t.get("streams_via_repeater", 0), f"{s['wall_s']:.0f} s",
                     "pass" if all(s["checks"].values()) else "**fail: " + ", ".join(
                         k for k, ok in s["checks"].items() if not ok) + "**"])
    fault_rows = [[s["seed"], f["kind"], f["target"], f"{f['started_s']:.1f}", f"{f['duration_s']:.2f}",
                   restart_cell(f), f.get("connections_dropped", "-"),
                   f"{max_health(f):.3f}" if max_health(f) is not None else "**none**",
                   max(f["health_s"], key=lambda n: f["health_s"][n] or 1e9)]
                  for s in results["seeds"] for f in s["faults"]]
    lines = [
        "## Fault injection (issue 10)",
        "",
        f"{results['date']}. {common.machine_line(results['machine'], results['load_avg_at_end'])}",
        f"Command: `{results['command']}`; workflow `{config['workflow']}` plus peers "
        f"{', '.join(config['repeater_peers'])} of level-1 repeaters of {len(config['repeated_streams'])} leaf "
        f"streams, {config['match']}, {feed_text(config['speedup'])}; every output stream recorded, by two processes "
        "(the consumer takes the tight streams, the recorder all others) that pick publishers at random (producers "
        "or repeaters). Each process (repository, every peer) is an OS "
        "process of its own.",
        "",
        f"Reference (undisturbed): {ref['sent']:,} rows fed in {ref['feed_s']:.1f} s, {ref['tuples']:,} tuples on "
        f"{ref['streams']} streams, {ref['missed']} missed; {control_text(ref['control_health'])} "
        f"Faults per seed: {config['faults_per_seed']}, one after "
        f"the other over the first {config['window_s']:.0f} s of the feed: pause = SIGSTOP then SIGCONT "
        f"({config['producer_pause_s'][0]:g}-{config['producer_pause_s'][1]:g} s for producing peers, "
        f"{config['other_pause_s'][0]:g}-{config['other_pause_s'][1]:g} s for the others); restart = SIGKILL, "
        f"{config['restart_down_s'][0]:g}-{config['restart_down_s'][1]:g} s down, same command again (the fault "
        f"ends when it answers `/health`); drop = every TCP connection of the process's HTTP ports aborted "
        f"({config['drop']}); stall = the consumer of the tight streams paused "
        f"{config['stall_s'][0]:g}-{config['stall_s'][1]:g} s. The buffers of the repeated streams' producers and "
        f"of the repeaters hold the whole match ({config['covering_buffer']:,} tuples), so pauses and restarts "
        f"lose nothing; {', '.join(config['tight_workers'])} keeps only {config['tight_buffer']} tuples per "
        "stream, so a stall loses some of its tuples, which the subscriber must report. A run hangs if it "
        f"takes more than {config['bound_s']:.0f} s.",
        "",
        "Lost / duplicated / changed = tuples of the reference missing from / twice in / different in the "
        "recording, by index; reported = indices the subscriber reported as missed; unreported = lost outside "
        "every reported gap. Health = seconds from the end of a fault until every process has answered `/health` "
        f"(bound {config['health_bound_s']:g} s).",
        "",
        common.markdown_table(["Seed", "Faults", "Health max", "No answer", "Identical streams", "Lost", "Reported",
                               "Unreported", "Duplicated", "Changed", "Streams via repeaters", "Wall", "Checks"],
                              rows, align="rlrrrrrrrrrrl"),
        "",
        "Every fault, with the slowest `/health` answer after it:",
        "",
        common.markdown_table(["Seed", "Fault", "Target", "At s", "Duration s", "Back after s", "Connections cut",
                               "Health max s", "Slowest process"], fault_rows, align="rllrrrrrl"),
        "",
        common.image_link(SECTION, "health latency after each fault"),
    ]
    return "\n".join(lines)
