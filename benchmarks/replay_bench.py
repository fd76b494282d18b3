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
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import common, floor_bench, query_delay, wires
from benchmarks.replay_cpu import PROFILE_AFTER_S, SAMPLE_S
from benchmarks.replay_measure import fixed_cost, measure, per_row_cpu, summarize
from benchmarks.replay_report import SECTION, plot_runs, report
from benchmarks.replay_workflows import event_time_s, one_worker_per_peer

HELP = "fast (unpaced) replay throughput of the full-game workflow, with CPU per process (and per worker)"
LAYOUT_TITLES = {"by_peer": "as in the workflow", "pulls_batched": "as in the workflow, batched pulls",
                 "pulls_per_stream": "as in the workflow, pulls per stream", "by_worker": "one worker per process"}


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
            if "json" in by_wire:  # end to end, each wire's over JSON's (the targets are end to end)
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
