"""`pan bench distribution`: the full-game workflow spread over 3, 6, 8 and 14 peers, in real time.

Every workflow gets the same match (generated and split once) and the same
measurement as `pan bench query-delay` (`benchmarks/query_delay.py`: replay at
speedup 1, clients on SENSOR105, B2, BP_wholeGame_A, a heat map and SHOTS,
delay = receive time - send time of the sensor row the tuple answers), one
workflow after the other, so the numbers show what distributing the same
work over more processes costs or gains on this machine.  ``received`` is
every tuple the client got; ``count`` those with a delay (a matching row).

Each workflow runs once per wire format of ``--wires`` (JSON and Arrow pages by
default, `benchmarks/wires.py`), the formats alternating, with ``PAN_WIRE`` set
for every process of the run (the peers, the replay's recorder and the
observing client).  A real-time run lasts as long as its match: 1 min of match on four workflows
and two formats is ~12 minutes per repetition, and a figure needs the default
five (``--reps``). Each stream's delays are the median over the runs of each
run's p50 (p90, ...), with the spread of the p50s and p99s.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import common, query_delay, wires
from pan.util import eventloop

HELP = "query delay and tuples received per stream of the full-game workflow on 3, 6, 8 and 14 peers"
SECTION = "distribution-bench"
WORKFLOWS = [str(query_delay.ROOT / "workflows" / f"full_game_{n}_peers.json") for n in (3, 6, 8, 14)]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workflows", nargs="+", default=WORKFLOWS, metavar="WF",
                   help="workflow files to compare (default: full_game_{3,6,8,14}_peers.json)")
    p.add_argument("--reps", type=int, default=5, metavar="N",
                   help="real-time runs per workflow and wire format; each lasts as long as the match")
    wires.add_argument(p)
    p.add_argument("--pulls", type=common.parse_pulls, default=None, metavar="P[,P]",
                   help=f"run each workflow with each of these worker pulls ({common.PULLS_HELP}), interleaved "
                        "(default: as it says)")
    query_delay.add_replay_arguments(p, "20 s of match per workflow, no Spark: a few minutes for all four")


async def measure_one(workflow: Path, data: Path, work: Path) -> dict[str, Any]:
    """One workflow's peers and, per stream, delay summary plus tuples received."""
    from pan.workflow.parser import load_workflow

    received = await query_delay.receive(workflow, data, work)
    measured = query_delay.delays(work / query_delay.SEND_LOG, received)
    streams = {s: {**common.summarize_ms(measured[s]), "received": len(received[s])} for s in received}
    return {"peers": len(load_workflow(workflow).peers()), "streams": streams}


def combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The runs of one workflow and wire: per stream the median of each quantile and the spread over the runs."""
    streams = {stream: common.combine_delays([r["streams"][stream] for r in runs]) for stream in runs[0]["streams"]}
    return {"peers": runs[0]["peers"], "streams": streams,
            "runs": [{k: r[k] for k in ("load_avg_before", "load_avg_after")} for r in runs]}


def run(args: argparse.Namespace) -> int:
    if args.reps < 1:
        print("pan bench distribution: --reps must be >= 1", file=sys.stderr)
        return 2
    problem = wires.check_available(args.wires)
    if problem:
        print(f"pan bench distribution: {problem}", file=sys.stderr)
        return 2
    machine = common.machine()
    by_run: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with tempfile.TemporaryDirectory(prefix="pan-distribution-") as tmp:
        work = Path(tmp)
        data = query_delay.prepare_data(args, work)  # one match for every distribution
        variants = [(Path(source), pulls) for source in args.workflows for pulls in (args.pulls or [None])]
        for rep in range(args.reps):
            for source, pulls in variants:
                name = source.stem if pulls is None else f"{source.stem} ({pulls} pulls)"
                # Interleaved, the order turned round every repetition: a run leaves the load high for the next.
                for wire in args.wires if rep % 2 == 0 else reversed(args.wires):
                    run_dir = work / f"{source.stem}-{pulls}-{wire}-{rep}"
                    run_dir.mkdir()
                    workflow = query_delay.on_free_ports_copy(source, run_dir)
                    if pulls is not None:
                        workflow = common.with_pulls(workflow, workflow, pulls)
                    before = wires.load_avg()
                    with wires.chosen(wire):  # inherited by `pan run`, its peers and the observer
                        result = eventloop.run(measure_one(workflow, data, run_dir))
                    result.update(load_avg_before=before, load_avg_after=wires.load_avg())
                    by_run.setdefault(name, {}).setdefault(wire, []).append(result)
                    cells = ", ".join(f"{s} p50 {common.fmt(d['p50_ms'])} ms n={d['received']}"
                                      for s, d in result["streams"].items())
                    print(f"distribution {name} {wire} {rep + 1}/{args.reps} ({result['peers']} peers, load "
                          f"{before[0]:.2f} -> {result['load_avg_after'][0]:.2f}): {cells}", file=sys.stderr,
                          flush=True)
    results: dict[str, Any] = {
        "config": {"wires": args.wires, "reps": args.reps, "match": query_delay.match_text(args)},
        "load_avg_at_end": wires.load_avg(),
        "workflows": {name: {wire: combine(runs) for wire, runs in per_wire.items()}
                      for name, per_wire in by_run.items()},
    }
    from benchmarks import plots

    common.publish(results, args.write, SECTION, lambda: report(results, machine, args),
                   lambda png: plots.distribution(plot_runs(results), png))
    return 0


def plot_runs(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """One bar series per workflow and wire, in the shape `plots.distribution` draws."""
    return {f"{name}-{wire}": {"peers": r["peers"], "label": f"{r['peers']} peers, {wire}", "streams": r["streams"]}
            for name, per_wire in results["workflows"].items() for wire, r in per_wire.items()}


def peer_counts(results: dict[str, Any]) -> str:
    """``3, 6, 8 and 14``: the distributions measured."""
    counts = list(dict.fromkeys(str(next(iter(per_wire.values()))["peers"])
                                for per_wire in results["workflows"].values()))  # a variant counts once
    return counts[0] if len(counts) == 1 else f"{', '.join(counts[:-1])} and {counts[-1]}"


def report(results: dict[str, Any], machine: dict[str, Any], args: argparse.Namespace) -> str:
    names = results["config"]["wires"]
    compared = [wire for wire in names if wire != "json"] if "json" in names else []  # p50 over JSON's
    rows = []
    for name, per_wire in results["workflows"].items():
        first = next(iter(per_wire.values()))
        for stream in first["streams"]:
            cells = [f"`{name}`", first["peers"], f"`{stream}`", first["streams"][stream]["received"]]
            for wire in names:
                s = per_wire[wire]["streams"][stream]
                cells += [common.with_spread(s, "p50_ms"), common.with_spread(s, "p99_ms")]
            for wire in compared:
                ratio = wires.ratio(per_wire[wire]["streams"][stream]["p50_ms"],
                                    per_wire["json"]["streams"][stream]["p50_ms"])
                cells.append(f"{ratio:.2f}" if ratio is not None else "-")
            target = query_delay.TARGETS_MS.get(stream)
            cells.append(common.fmt(target) if target else "-")
            cells.append(" / ".join(query_delay.target_cells(stream, per_wire[w]["streams"][stream])[1]
                                    for w in names))
            rows.append(cells)
    header = ["workflow", "peers", "stream", "received"]
    for wire in names:
        header += [f"p50 ms {wire}", f"p99 ms {wire}"]
    header += [f"p50 {wire} / json" for wire in compared]
    header += ["target p50", f"met ({' / '.join(names)})"]
    align = "lrlr" + "rr" * len(names) + "r" * len(compared) + "rl"
    loads = [r for per_wire in results["workflows"].values() for w in per_wire.values() for r in w["runs"]]
    spreads = (" With several runs, each cell is the median over the runs, their min-max in brackets."
               if results["config"]["reps"] > 1 else "")
    return "\n".join([
        f"## Distribution: the full game on {peer_counts(results)} peers, {' and '.join(names)} pages "
        "(issues 6 and 13)",
        "",
        f"{common.utc_now()}. {common.machine_line(machine, results['load_avg_at_end'])}",
        f"Command: `{common.command_line()}`; every workflow replayed in real time, one after the other, on the "
        f"same data ({query_delay.match_text(args)}), all peers on this machine; wire formats "
        f"{', '.join(names)}, {results['config']['reps']} run(s) each, alternating, with `PAN_WIRE` set for every "
        "process of the run (peers, the replay's recorder, the observing client). Load average (1 min) before each "
        f"run: {min(r['load_avg_before'][0] for r in loads):.2f} - {max(r['load_avg_before'][0] for r in loads):.2f}, "
        f"after: {min(r['load_avg_after'][0] for r in loads):.2f} - {max(r['load_avg_after'][0] for r in loads):.2f}.",
        "Delay = client receive time - send time of the sensor row the tuple answers, as in the query-delay "
        "section; 'received' = tuples the client got (the fewest of any run)." + spreads,
        "",
        common.markdown_table(header, rows, align=align),
        "",
        common.image_link(SECTION, "query delay per stream and distribution"),
    ])
