"""`pan bench query-delay`: per-tuple query delay of the full-game workflow in real time.

A generated match is replayed at speedup 1 (every sensor its own TCP
connection, paced in event time) into a workflow started with `pan run`.
Clients subscribe to a few output streams and note when each tuple arrives.

Query delay of a tuple = its receive time at the client minus the send time
of the sensor row it answers (as in the seed thesis, §5.2.2): for a raw
sensor stream the row with the same ``ts``; for a derived stream at event
time T, the newest sensor row with ``ts <= T`` (the input that completed T).
Both clocks are this machine's wall clock (``time.time_ns``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import common
from benchmarks.observer import read_arrivals
from pan.util import eventloop

HELP = "query delay per stream (SENSOR105, B2, BP_wholeGame_A, a heat map, SHOTS) replaying in real time"
SECTION = "query-delay-bench"
ROOT = Path(__file__).resolve().parents[1]
STREAMS = ["SENSOR105", "B2", "BP_wholeGame_A", "HM_1min_16x25_A2", "SHOTS"]
TARGETS_MS = {"SENSOR105": 10.0, "B2": 20.0, "BP_wholeGame_A": 50.0}
SEED_REPORTED_MS = {"SENSOR105": "61", "B2": "90-124", "BP_wholeGame_A": "906"}
PS = 10**12
SEND_LOG = "send.csv"  # in the work folder: stream, ts, send time (ns) of every sensor row
ARRIVALS = "received.csv"  # in the work folder: stream, ts, receive time (ns) of every observed tuple
CLIENT_START_S = 30.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workflow", default=str(ROOT / "workflows" / "full_game_3_peers.json"))
    p.add_argument("--reps", type=int, default=5, metavar="N",
                   help="real-time replays of the same match; each stream's figures are the medians over them")
    add_replay_arguments(p, "20 s of match, no Spark: under a minute per replay")


def add_replay_arguments(p: argparse.ArgumentParser, quick_help: str) -> None:
    """Options shared with `pan bench distribution` (same data preparation and report)."""
    p.add_argument("--minutes", type=float, default=1.0, help="minutes of match to generate (seed 2013)")
    p.add_argument("--data", type=Path, help="a `pan split` folder to use instead of generating one")
    p.add_argument("--quick", action="store_true", help=quick_help)
    p.add_argument("--write", type=Path, help="update this markdown report (e.g. docs/benchmarks.md); "
                   "its plot goes to img/ beside it")


def prepare_data(args: argparse.Namespace, work: Path) -> Path:
    """A split folder: given, or generated (split by Spark, or by a plain splitter with --quick)."""
    if args.data is not None:
        return given_split(Path(args.data))
    from simulator.match import generate

    minutes = 20 / 60 if args.quick else args.minutes
    generate(work / "game", minutes, seed=2013)
    if args.quick:
        return plain_split(work / "game", work / "split")
    from simulator.split import split

    split(work / "game" / "full-game", work / "split")
    return work / "split"


def given_split(data: Path) -> Path:
    """``data`` if it is a split folder (per-sensor files), else a clear error instead of a traceback mid-run."""
    from simulator.sources import sensor_files

    if not data.is_dir() or not sensor_files(data):
        raise SystemExit(f"pan bench: --data {data}: not a folder written by `pan split` (no per-sensor files)")
    return data


def plain_split(game: Path, out: Path, until_ts: int | None = None, since_ts: int | None = None) -> Path:
    """One file per sensor, sorted by ts, without Spark; only rows from ``since_ts`` up to ``until_ts`` if given."""
    rows: dict[bytes, list[tuple[int, bytes]]] = {}
    for line in (game / "full-game").read_bytes().splitlines():
        sid, ts_text, _ = line.split(b",", 2)
        ts = int(ts_text)
        if (until_ts is None or ts <= until_ts) and (since_ts is None or ts >= since_ts):
            rows.setdefault(sid, []).append((ts, line))
    out.mkdir(parents=True, exist_ok=True)
    for sid, lines in rows.items():
        lines.sort()
        (out / f"SENSOR{sid.decode()}.csv").write_bytes(b"\n".join(line for _, line in lines) + b"\n")
    header, *spans = (game / "interruptions.csv").read_bytes().splitlines(keepends=True)
    kept = [row for row in spans if until_ts is None or int(row.split(b",", 1)[0]) <= until_ts]
    (out / "interruptions.csv").write_bytes(header + b"".join(kept))
    return out


async def receive(workflow_path: Path, data: Path, work: Path, streams: list[str] = STREAMS, *,
                  attach: bool = False) -> dict[str, list[tuple[int, int]]]:
    """Replay ``data`` in real time into the workflow; (ts, receive ns) of every tuple of ``streams``.

    ``attach``: the workflow runs already (`pan bench cluster` starts it on namespace hosts).

    The simulator logs every row's send time to ``work/send.csv`` (`SEND_LOG`), which `delays`
    matches; a separate client process (`benchmarks/observer.py`) notes the arrivals.
    """
    from pan.workflow.parser import load_workflow
    from simulator.replay import replay
    from simulator.simulate import simulate
    from simulator.simulate_options import SimulateOptions

    workflow = load_workflow(workflow_path)
    options = SimulateOptions(workflow=workflow, data_dir=data, speedup=1.0, send_log=work / SEND_LOG)

    async def feed() -> Any:
        return (await simulate(options)).as_dict()

    arrivals = work / ARRIVALS
    observer = common.Child(
        [sys.executable, "-m", "benchmarks.observer", "--repository", workflow.repository.address,
         "--out", str(arrivals), *streams], startup_s=CLIENT_START_S, grace_s=CLIENT_START_S,
    )
    async with observer:
        if observer.ready_line.strip() != b"ready":
            raise RuntimeError(f"observer process did not start (said {observer.ready_line!r})")
        await replay(workflow_path, workflow, feed, work / "record", only=["BP_wholeGame_B"], attach=attach)
    return read_arrivals(arrivals, streams)


async def measure(workflow_path: Path, data: Path, work: Path) -> dict[str, list[float]]:
    """Query delays (ms) per stream of one real-time replay."""
    return delays(work / SEND_LOG, await receive(workflow_path, data, work))


def on_free_ports_copy(workflow: Path, work: Path) -> Path:
    """The workflow moved to free ports (in ``work``), so a run never clashes with another on this machine."""
    from pan.workflow.parser import on_free_ports

    path = work / "workflow.json"
    path.write_text(json.dumps(on_free_ports(json.loads(Path(workflow).read_text()))))
    return path


def delays(send_log: Path, received: dict[str, list[tuple[int, int]]]) -> dict[str, list[float]]:
    """Milliseconds per received tuple, by the matching rule in the module docstring."""
    per_stream: dict[str, dict[int, int]] = {}
    all_ts: list[int] = []
    all_sent: list[int] = []
    for line in send_log.read_text().splitlines()[1:]:
        stream, ts, sent = line.split(",")
        if stream.startswith("SENSOR"):
            per_stream.setdefault(stream, {})[int(ts)] = int(sent)
            all_ts.append(int(ts))
            all_sent.append(int(sent))
    order = np.argsort(all_ts, kind="stable")
    ts_sorted = np.asarray(all_ts, dtype=np.int64)[order]
    sent_sorted = np.asarray(all_sent, dtype=np.int64)[order]
    newest_sent = np.maximum.accumulate(sent_sorted)  # rows with ts <= T: the last one sent
    out: dict[str, list[float]] = {}
    for stream, tuples in received.items():
        values = []
        for ts, recv in tuples:
            if stream in per_stream:
                sent = per_stream[stream].get(ts)
            else:
                k = int(np.searchsorted(ts_sorted, ts, side="right")) - 1
                sent = int(newest_sent[k]) if k >= 0 else None
            if sent is not None:
                values.append((recv - sent) / 1e6)
        out[stream] = values
    return out


def run(args: argparse.Namespace) -> int:
    if args.reps < 1:
        print("pan bench query-delay: --reps must be >= 1", file=sys.stderr)
        return 2
    machine = common.machine()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="pan-qdelay-") as tmp:
        work = Path(tmp)
        data = prepare_data(args, work)
        for rep in range(args.reps):
            run_dir = work / f"run-{rep}"
            run_dir.mkdir()
            before = load_avg()
            measured = eventloop.run(measure(on_free_ports_copy(args.workflow, run_dir), data, run_dir))
            streams = {stream: common.summarize_ms(values) for stream, values in measured.items()}
            runs.append({"load_avg_before": before, "load_avg_after": load_avg(), "streams": streams})
            print(f"query-delay {rep + 1}/{args.reps} (load {before[0]:.2f} -> {runs[-1]['load_avg_after'][0]:.2f}): "
                  + ", ".join(f"{s} p50 {common.fmt(d['p50_ms'])} ms" for s, d in streams.items()),
                  file=sys.stderr, flush=True)
    results = {
        "config": {"reps": args.reps, "match": match_text(args), "workflow": Path(args.workflow).name},
        "streams": {stream: common.combine_delays([r["streams"][stream] for r in runs]) for stream in STREAMS},
        "runs": runs,
        "load_avg_at_end": load_avg(),
    }
    from benchmarks import plots

    common.publish(results, args.write, SECTION, lambda: report(results, machine, args),
                   lambda png: plots.query_delay(results["streams"], png, TARGETS_MS))
    return 0


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def delay_cells(s: dict[str, Any]) -> list[str]:
    """p50, p90, p99 and max of a `common.summarize_ms` result as table cells."""
    return [common.fmt(s[k]) for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")]


def target_cells(stream: str, s: dict[str, Any]) -> list[str]:
    """The issue-6 p50 target of ``stream`` and whether it was met ('-' without a target or a value)."""
    target = TARGETS_MS.get(stream)
    met = "-" if target is None or s["p50_ms"] is None else ("yes" if s["p50_ms"] <= target else "**no**")
    return [common.fmt(target) if target else "-", met]


def match_text(args: argparse.Namespace) -> str:
    """What was replayed, for the report."""
    if args.data is not None:
        return f"the split match in `{args.data}`"
    return f"{'20 s' if args.quick else f'{args.minutes:g} min'} of a generated match"


def report(results: dict[str, Any], machine: dict[str, Any], args: argparse.Namespace) -> str:
    rows = [[f"`{stream}`", s["count"], common.with_spread(s, "p50_ms"), common.fmt(s["p90_ms"]),
             common.with_spread(s, "p99_ms"), common.fmt(s["max_ms"]), *target_cells(stream, s),
             SEED_REPORTED_MS.get(stream, "-")]
            for stream, s in results["streams"].items()]
    table = common.markdown_table(
        ["stream", "tuples", "p50 ms", "p90 ms", "p99 ms", "max ms", "target p50", "met", "seed (14 peers)"], rows
    )
    runs = results["runs"]
    before = [r["load_avg_before"][0] for r in runs]
    return "\n".join([
        "## Query delay (issues 5, 6 and 18)",
        "",
        f"{common.utc_now()}. {common.machine_line(machine, results['load_avg_at_end'])}",
        f"Command: `{common.command_line()}`; workflow `{results['config']['workflow']}`, "
        f"{len(runs)} real-time replays of the same data ({match_text(args)}), all peers on this machine. "
        f"Load average (1 min) before each replay: {min(before):.2f} - {max(before):.2f}.",
        "Delay = client receive time - send time of the sensor row the tuple answers (module docstring of "
        "`benchmarks/query_delay.py`). The simulator runs in the benchmark process, the observing client in "
        "a process of its own (`benchmarks/observer.py`).",
        "Each cell is the median over the replays of that replay's percentile; p50 and p99 show the replays' "
        "min-max in brackets; 'tuples' is the fewest any replay received with a delay. The raw per-replay figures "
        f"are in `results/{SECTION}.json` beside this report.",
        "",
        table,
        "",
        common.image_link(SECTION, "query delay per stream"),
    ])
