"""`pan bench ingest`: TCP ingest of a generated match, per-line path against block path, in the same run.

A real ``IngestServer`` (pan/ingest/server.py) with the ``debs_csv`` decoder runs
in this process and stores what it receives the way a forwarder does
(``encode_batches`` into an ``OutputStream`` per sensor stream). A sender
process (``python -m benchmarks.ingest_parts``) writes the match's
rows to it over loopback TCP as fast as the server takes them, either all
of ``full-game`` over one connection (``--feed merged``) or one connection
per sensor, each with its own rows (``--feed per-sensor``, like `pan
simulate`). The two parse paths alternate rep by rep: ``parse_blocks``
false (line by line, the reference) and true (a read at a time, with numpy).

Reported per path: rows/s from the first delivered read to the last row
stored (median, min-max), and this process's CPU time per row over the same
span (it hosts only the server). Two more tables time the parse and the
rendering alone on one read's rows: the per-line decoder, the block parser and
pyarrow's CSV reader; the block renderer, per-row %-formatting (the per-line
path) and a dict through orjson.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import common

HELP = "TCP ingest of a generated match into a real IngestServer: per-line vs block parsing, side by side"
SECTION = "ingest-bench"
FEEDS = ("merged", "per-sensor")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--minutes", type=float, default=1.0, help="minutes of match to generate (seed 2013)")
    p.add_argument("--reps", type=int, default=5, help="repetitions of each path, interleaved (medians reported)")
    p.add_argument("--feed", choices=FEEDS, default="merged",
                   help="one connection with every row (merged), or one connection per sensor")
    p.add_argument("--write", type=Path, help="update this markdown report (e.g. docs/benchmarks.md)")


def run(args: argparse.Namespace) -> int:
    if args.reps < 1:
        print("pan bench ingest: --reps must be >= 1", file=sys.stderr)
        return 2
    if not 0 < args.minutes <= 120:
        print("pan bench ingest: --minutes must be in (0, 120]", file=sys.stderr)
        return 2
    from pan.util import eventloop

    results: dict[str, Any] = {
        **common.run_header("ingest"),
        "config": {"minutes": args.minutes, "reps": args.reps, "feed": args.feed, "loop": eventloop.loop_name()},
    }
    with tempfile.TemporaryDirectory(prefix="pan-ingest-bench-") as tmp:
        from simulator.match import generate

        generate(Path(tmp), args.minutes, seed=2013)
        files = feed_files(Path(tmp) / "full-game", args.feed)
        results.update(eventloop.run(measure(files, args.reps)))
        results["parse"] = measure_parse(files, args.reps)
        results["render"] = measure_render(files, args.reps)
        results["read_sizes"] = measure_read_sizes(files, args.reps)
    results["load_avg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    common.publish(results, args.write, SECTION, lambda: report(results))
    return 0


def feed_files(game: Path, feed: str) -> list[Path]:
    """What the sender sends, one file per connection: the whole game, or each sensor's rows in order."""
    if feed == "merged":
        return [game]
    per_sensor: dict[bytes, list[bytes]] = {}
    for line in game.read_bytes().splitlines(keepends=True):
        per_sensor.setdefault(line.split(b",", 1)[0], []).append(line)
    files = []
    for sid, lines in sorted(per_sensor.items()):
        path = game.with_name(f"sensor-{int(sid)}.csv")
        path.write_bytes(b"".join(lines))
        files.append(path)
    return files


def streams_of(files: list[Path]) -> tuple[set[str], int]:
    """The sensor streams in the files and their number of rows."""
    streams, rows = set(), 0
    for path in files:
        for line in path.read_bytes().splitlines():
            streams.add(f"SENSOR{int(line.split(b',', 1)[0])}")
            rows += 1
    return streams, rows


async def measure(files: list[Path], reps: int) -> dict[str, Any]:
    streams, rows = streams_of(files)
    runs: dict[str, list[dict[str, float]]] = {"line": [], "block": []}
    for rep in range(reps):
        for path in ("line", "block"):
            result = await one_run(files, streams, rows, parse_blocks=path == "block")
            runs[path].append(result)
            print(f"ingest {path} {rep + 1}/{reps}: {rows:,} rows at {result['rows_per_s']:,.0f} rows/s, "
                  f"{result['cpu_us_per_row']:.2f} us CPU/row (load {os.getloadavg()[0]:.2f})",
                  file=sys.stderr, flush=True)
    summary = {path: summarize(path_runs) for path, path_runs in runs.items()}
    return {
        "rows": rows, "streams": len(streams), "connections": len(files), "paths": summary, "runs": runs,
        "ratio_rows_per_s": round(summary["block"]["rows_per_s"] / summary["line"]["rows_per_s"], 2),
        "ratio_cpu_per_row": round(summary["line"]["cpu_us_per_row"] / summary["block"]["cpu_us_per_row"], 2),
    }


def summarize(runs: list[dict[str, float]]) -> dict[str, float]:
    rates = [r["rows_per_s"] for r in runs]
    cpu = [r["cpu_us_per_row"] for r in runs]
    return {"rows_per_s": round(statistics.median(rates), 1), "rows_per_s_min": min(rates),
            "rows_per_s_max": max(rates), "cpu_us_per_row": round(statistics.median(cpu), 3),
            "cpu_us_per_row_min": min(cpu), "cpu_us_per_row_max": max(cpu)}


async def one_run(files: list[Path], streams: set[str], rows: int, *, parse_blocks: bool) -> dict[str, float]:
    """One server, fed every file once; timed from its first delivered read to its last stored row."""
    from pan.buffers.streams import OutputStream
    from pan.ingest.decoders import encode_batches
    from pan.ingest.server import IngestServer
    from pan.ingest.settings import IngestSettings
    from simulator.debs_rows import DebsCsvDecoder

    outputs = {name: OutputStream(name) for name in streams}
    server: IngestServer
    clock: list[float] = []  # wall and CPU time at the first delivery, then at the last
    done = asyncio.Event()

    def deliver(batches: dict[str, Any]) -> None:  # what the forwarder does with them
        if not clock:
            clock.extend((time.perf_counter(), time.process_time()))
        starts = {stream: outputs[stream].next_index for stream in batches}
        for stream, encoded in encode_batches(batches, starts, server.row_format).items():
            outputs[stream].extend_encoded(encoded)
        if server.counters.rows >= rows:
            clock.extend((time.perf_counter(), time.process_time()))
            done.set()

    settings = IngestSettings(decoder=DebsCsvDecoder, parse_blocks=parse_blocks)
    server = IngestServer(common.HOST, 0, streams, deliver, settings=settings)
    await server.start()
    sender = common.Child([sys.executable, "-m", "benchmarks.ingest_parts", common.HOST, str(server.port),
                           *map(str, files)], ready=False)
    try:
        await sender.start()
        async with asyncio.timeout(600):
            await done.wait()
        seconds, cpu = clock[2] - clock[0], clock[3] - clock[1]
        await sender.output(60)
        for _ in range(6000):  # let the server see the sender's end before it stops
            if server.counters.open_connections == 0:
                break
            await asyncio.sleep(0.01)
    finally:
        await sender.stop()
        await server.stop()
    problems = server.counters.malformed + server.counters.unexpected + sum(server.counters.rejected.values())
    if problems or server.counters.rows != rows:
        raise RuntimeError(f"ingest bench: {server.counters.as_dict()} for {rows} rows sent")
    return {"seconds": round(seconds, 3), "rows_per_s": round(rows / seconds, 1),
            "cpu_us_per_row": round(cpu / rows * 1e6, 3)}


def one_read(files: list[Path]) -> bytes:
    """The whole lines of the first 256 KiB the sender sends: what one read of the server holds."""
    data = files[0].read_bytes()
    return data[: data.rfind(b"\n", 0, 256 * 1024) + 1]


def time_ways(ways: dict[str, Callable[[], Any]], rows: int, reps: int) -> dict[str, dict[str, float]]:
    """Microseconds per row of each way, its runs interleaved with the others'."""
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(reps):
        for name, way in ways.items():
            began = time.perf_counter()
            way()
            times[name].append((time.perf_counter() - began) / rows * 1e6)
    return {name: {"median": round(statistics.median(t), 3), "min": round(min(t), 3), "max": round(max(t), 3)}
            for name, t in times.items()}


def measure_parse(files: list[Path], reps: int) -> dict[str, Any]:
    """Parse one read's lines: the per-line decoder, the numpy block parser and, if installed, pyarrow's CSV reader.

    pyarrow's reader is timed on the parse alone: it would still need the strict syntax checks (it takes
    " 5") that the block parser does as it goes.
    """
    from pan.wire.int_csv import parse_block
    from simulator.debs_rows import CSV_LAYOUT, SENSOR_FIELDS, DebsCsvDecoder

    block_bytes = one_read(files)
    lines = block_bytes.splitlines()
    keys = {f"SENSOR{int(line.split(b',', 1)[0])}" for line in lines}
    decoder = DebsCsvDecoder(keys, None)  # type: ignore[arg-type]  # every line is valid: nothing is refused
    ways: dict[str, Callable[[], Any]] = {
        "per-line decoder (regex, split, int)": lambda: [decoder.decode(line) for line in lines],
        "block parser (numpy)": lambda: parse_block(block_bytes, CSV_LAYOUT, 16 * 1024),
    }
    try:
        import io

        import pyarrow as pa
        from pyarrow import csv as pa_csv
    except ImportError:
        pass
    else:
        read = pa_csv.ReadOptions(column_names=list(SENSOR_FIELDS), use_threads=False)
        convert = pa_csv.ConvertOptions(column_types=dict.fromkeys(SENSOR_FIELDS, pa.int64()))
        ways["pyarrow.csv.read_csv (parse only)"] = lambda: pa_csv.read_csv(
            io.BytesIO(block_bytes), read_options=read, convert_options=convert)
    assert parse_block(block_bytes, CSV_LAYOUT, 16 * 1024).values.tolist() == [row for _, row in ways[
        "per-line decoder (regex, split, int)"]()], "parsers disagree"
    return {"rows": len(lines), "us_per_row": time_ways(ways, len(lines), max(reps, 5) * 4)}


def measure_render(files: list[Path], reps: int) -> dict[str, Any]:
    """Render one read's rows as stored tuples three ways (all of one read in one call, as the forwarder does)."""
    import numpy as np
    import orjson

    from pan.wire.int_csv import RowBlock, parse_block
    from simulator.debs_rows import CSV_LAYOUT, SENSOR_FIELDS

    block = parse_block(one_read(files), CSV_LAYOUT, 16 * 1024)
    rows = RowBlock(block, np.arange(len(block.taken)), CSV_LAYOUT)
    values = block.values.tolist()
    fmt, names = CSV_LAYOUT.json_format(), ("i", *SENSOR_FIELDS)
    start = 1_000_000
    ways: dict[str, Callable[[], Any]] = {
        "block render (one call per read)": lambda: rows.encode(start),
        "per-row %-format (per-line path)": lambda: [fmt % (start + n, *row) for n, row in enumerate(values)],
        "dict + orjson": lambda: [orjson.dumps(dict(zip(names, (start + n, *row), strict=True)))
                                  for n, row in enumerate(values)],
    }
    reference = ways["per-row %-format (per-line path)"]()
    assert all(way() == reference for way in ways.values()), "renderers disagree"
    return {"rows": len(values), "us_per_row": time_ways(ways, len(values), max(reps, 5) * 4)}


#: Lines per read in ``measure_read_sizes``: a 200 Hz source's 200 ms slice is 40 rows, a 2 kHz one's 400.
READ_SIZES = (1, 10, 31, 32, 40, 64, 100, 1000)


def measure_read_sizes(files: list[Path], reps: int) -> dict[str, Any]:
    """Microseconds per row of the block and the per-line path by lines per read, each through a server's
    delivery into output streams (what a read costs the forwarder), from one sensor's rows.

    Why reads below ``pan.ingest.settings.BLOCK_MIN_LINES`` lines go line by line whatever ``parse_blocks`` says.
    """
    from pan.buffers.streams import OutputStream
    from pan.ingest.decoders import encode_batches
    from pan.ingest.server import IngestServer
    from pan.ingest.settings import BLOCK_MIN_LINES, IngestSettings
    from simulator.debs_rows import DebsCsvDecoder

    lines = files[0].read_bytes().splitlines(keepends=True)
    sid = lines[0].split(b",", 1)[0]
    lines = [line for line in lines if line.split(b",", 1)[0] == sid][:20_000]
    stream = f"SENSOR{int(sid)}"

    def server(parse_blocks: bool) -> IngestServer:
        out = OutputStream(stream)

        def deliver(batches: dict[str, Any]) -> None:
            for encoded in encode_batches(batches, {stream: out.next_index}, made.row_format).values():
                out.extend_encoded(encoded)

        made = IngestServer(common.HOST, 0, {stream}, deliver,
                            settings=IngestSettings(decoder=DebsCsvDecoder, parse_blocks=parse_blocks))
        return made

    by_size: dict[str, Any] = {}
    for size in READ_SIZES:
        reads = [b"".join(lines[at : at + size]) for at in range(0, len(lines), size)]
        ways: dict[str, Callable[[], Any]] = {  # one server per pass: its making is not a read's cost
            "block": lambda reads=reads: deliver_each(server(True), reads, blocks=True),
            "per line": lambda reads=reads: deliver_each(server(False), reads, blocks=False),
        }
        by_size[str(size)] = time_ways(ways, len(lines), max(reps, 5))
    return {"stream": stream, "rows": len(lines), "block_min_lines": BLOCK_MIN_LINES, "us_per_row": by_size}


def report(results: dict[str, Any]) -> str:
    paths, config = results["paths"], results["config"]
    table = common.markdown_table(
        ["Path", "Rows/s (median)", "Min - max", "CPU us/row (median)", "Min - max"],
        [[name, common.fmt(p["rows_per_s"], 0), f"{common.fmt(p['rows_per_s_min'], 0)} - "
          f"{common.fmt(p['rows_per_s_max'], 0)}", f"{p['cpu_us_per_row']:.2f}",
          f"{p['cpu_us_per_row_min']:.2f} - {p['cpu_us_per_row_max']:.2f}"]
         for name, p in (("per line (`parse_blocks: false`)", paths["line"]),
                         ("block (`parse_blocks: true`)", paths["block"]))],
        align="lrrrr",
    )
    kernels = {
        kind: common.markdown_table(
            ["Way", "us/row (median)", "Min - max"],
            [[name, f"{t['median']:.3f}", f"{t['min']:.3f} - {t['max']:.3f}"]
             for name, t in results[kind]["us_per_row"].items()],
            align="lrr",
        )
        for kind in ("parse", "render")
    }
    return "\n".join([
        *common.report_head("## Ingest: per-line against block parsing", results),
        "",
        f"Command: `{results['command']}`; {config['minutes']:g} min of a generated match, "
        f"{results['rows']:,} rows of {results['streams']} sensor streams over {results['connections']} "
        f"loopback connection(s) (`--feed {config['feed']}`), {config['loop']} event loop. A real `IngestServer` "
        "with the `debs_csv` decoder stores every row as the forwarder does; a sender process writes the rows as "
        f"fast as it takes them. The paths alternate, {config['reps']} reps each. Rows/s: rows / wall time from "
        "the first delivered read to the last stored row; CPU: the server process's CPU time over the same span.",
        "",
        table,
        "",
        f"Block against per-line: **{results['ratio_rows_per_s']:.2f}x** the rows/s, "
        f"**{results['ratio_cpu_per_row']:.2f}x** less CPU per row.",
        "",
        f"The two steps alone on one 256 KiB read ({results['parse']['rows']:,} rows), "
        f"{max(config['reps'], 5) * 4} interleaved reps each. Parsing (the same values, checked):",
        "",
        kernels["parse"],
        "",
        "pyarrow's row is its CSV reader alone: it still lacks what the block parser does as it goes, the strict "
        "syntax checks (it takes ` 5`, which the per-line path refuses) and each field's byte bounds, "
        "which the renderer copies the digits from; the block path stays on numpy, which PAN always has.",
        "",
        "Rendering the stored tuples (byte-identical outputs, checked):",
        "",
        kernels["render"],
        *read_sizes_report(results.get("read_sizes")),
    ])


def deliver_each(server: Any, reads: list[bytes], *, blocks: bool) -> None:
    """Every read through ``server``'s block or per-line delivery, as its read loop would."""
    for read in reads:
        if blocks:
            server._deliver_block(read)
        else:
            server._deliver_lines(read.split(b"\n")[:-1])


def read_sizes_report(sizes: dict[str, Any] | None) -> list[str]:
    if sizes is None:
        return []
    rows = []
    for size, ways in sizes["us_per_row"].items():
        block, line = ways["block"], ways["per line"]
        rows.append([size, f"{block['median']:.2f} ({block['min']:.2f} - {block['max']:.2f})",
                     f"{line['median']:.2f} ({line['min']:.2f} - {line['max']:.2f})",
                     f"{line['median'] / block['median']:.2f}x"])
    table = common.markdown_table(["Lines per read", "block us/row (min - max)", "per line us/row (min - max)",
                                   "block speed / per line"], rows, align="rrrr")
    return [
        "",
        f"By lines per read ({sizes['rows']:,} rows of `{sizes['stream']}`, each read parsed and stored into an "
        "output stream as the forwarder does; the ways alternate). A read of fewer than "
        f"{sizes['block_min_lines']} lines goes line by line whatever `parse_blocks` says (`BLOCK_MIN_LINES`):",
        "",
        table,
    ]
