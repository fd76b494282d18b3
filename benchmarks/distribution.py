"""`pan bench distribution`: the full-game workflow spread over 3, 6, 8 and 14 peers, in real time.

Every workflow gets the same match (generated and split once) and the same
measurement as `pan bench query-delay` (`benchmarks/query_delay.py`: replay at
speedup 1, clients on SENSOR105, B2, BP_wholeGame_A, a heat map and SHOTS,
delay = receive time - send time of the sensor row the tuple answers), one
workflow after the other, so the numbers show what distributing the same
work over more processes costs or gains on this machine.  ``received`` is
every tuple the client got; ``count`` those with a delay (a matching row).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import common, query_delay
from pan import eventloop

HELP = "query delay and tuples received per stream of the full-game workflow on 3, 6, 8 and 14 peers"
SECTION = "distribution-bench"
WORKFLOWS = [str(query_delay.ROOT / "workflows" / f"full_game_{n}_peers.json") for n in (3, 6, 8, 14)]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workflows", nargs="+", default=WORKFLOWS, metavar="WF",
                   help="workflow files to compare (default: full_game_{3,6,8,14}_peers.json)")
    query_delay.add_replay_arguments(p, "20 s of match per workflow, no Spark: a few minutes for all four")


async def measure_one(workflow: Path, data: Path, work: Path) -> dict[str, Any]:
    """One workflow's peers and, per stream, delay summary plus tuples received."""
    from pan.workflow import load_workflow

    received = await query_delay.receive(workflow, data, work)
    measured = query_delay.delays(work / query_delay.SEND_LOG, received)
    streams = {s: {**common.summarize_ms(measured[s]), "received": len(received[s])} for s in received}
    return {"peers": len(load_workflow(workflow).peers()), "streams": streams}


def run(args: argparse.Namespace) -> int:
    machine = common.machine()
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="pan-distribution-") as tmp:
        work = Path(tmp)
        data = query_delay.prepare_data(args, work)  # one match for every distribution
        for source in map(Path, args.workflows):
            run_dir = work / source.stem
            run_dir.mkdir()
            result = eventloop.run(measure_one(query_delay.on_free_ports_copy(source, run_dir), data, run_dir))
            results[source.stem] = result
            cells = ", ".join(f"{s} p50 {common.fmt(d['p50_ms'])} ms n={d['received']}"
                              for s, d in result["streams"].items())
            print(f"distribution {source.stem} ({result['peers']} peers): {cells}", file=sys.stderr, flush=True)
    from benchmarks import plots

    common.publish(results, args.write, SECTION, lambda: report(results, machine, args),
                   lambda png: plots.distribution(results, png))
    return 0


def report(results: dict[str, dict[str, Any]], machine: dict[str, Any], args: argparse.Namespace) -> str:
    rows = [[f"`{name}`", r["peers"], f"`{stream}`", s["received"], s["count"], *query_delay.delay_cells(s),
             *query_delay.target_cells(stream, s)]
            for name, r in results.items() for stream, s in r["streams"].items()]
    table = common.markdown_table(
        ["workflow", "peers", "stream", "received", "with delay", "p50 ms", "p90 ms", "p99 ms", "max ms",
         "target p50", "met"], rows, align="lrlrrrrrrrr"
    )
    return "\n".join([
        "## Distribution: the full game on 3, 6, 8 and 14 peers (issue 6)",
        "",
        f"{common.utc_now()}. {common.machine_line(machine, list(os.getloadavg()))}",
        f"Command: `{common.command_line()}`; every workflow replayed in real time, one after the other, on the "
        f"same data ({query_delay.match_text(args)}), all peers on this machine.",
        "Delay = client receive time - send time of the sensor row the tuple answers, as in the query-delay "
        "section; 'received' = tuples the client got, 'with delay' = those matched to a sensor row.",
        "",
        table,
        "",
        common.image_link(SECTION, "query delay per stream and distribution"),
    ])
