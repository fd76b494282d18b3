"""The recording processes of `pan bench chaos` (``python -m benchmarks.chaos_recorder record``).

They run off the loop that probes health: the recorder takes every stream but the tight ones and is never
faulted (it is the measuring instrument); the consumer takes only the tight streams, light enough to keep up
with their small buffers, and is what a stall pauses.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from benchmarks.chaos_workflow import tight_streams
from pan.util import eventloop

CONSUMER = "consumer"  # the recording process a stall pauses: it takes only the tight streams
QUIET_S = 6.0  # outputs unchanged this long after the data ended = done (> the ordering idle timeout)
MAX_DRAIN_S = 180.0
RECORD_LINGER_S = 0.05  # between fetches of one stream (as `pan replay`'s recorder)
RECORD_PAGE = 5000
RECORD_WAIT_MS = 500


@dataclass
class StreamRecord:
    """What the recorder saw of one stream, beyond its tuples."""

    received: int = 0
    reported_missed: int = 0  # the subscriber's own count of skipped indices
    reported_ranges: list[list[int]] = field(default_factory=list)  # [first, last] index of each reported gap
    unexplained_jumps: int = 0  # index jumps between delivered tuples that the client did not report as a gap
    resets: int = 0
    via_repeater: int = 0  # tuples that came from a repeater
    failovers: int = 0
    errors: int = 0


async def record_stream(stream: str, subscriber: Any, out: IO[bytes], state: StreamRecord) -> None:
    """Fetch ``stream`` forever, appending tuples to ``out`` and noting every gap and reset reported."""
    import orjson

    last = -1
    while True:
        fetch = await subscriber.fetch()
        if fetch.reset:
            state.resets += 1
            last = -1
        jumps = []
        for item in fetch.tuples:
            index = item["i"]
            if index > last + 1:
                jumps.append([last + 1, index - 1])
            last = max(last, index)
        reported = [list(gap) for gap in fetch.gaps]  # the client's own gaps: (first, last) missed index
        state.reported_missed += fetch.missed
        state.reported_ranges.extend(reported)
        state.unexplained_jumps += sum(1 for jump in jumps if jump not in reported)
        if fetch.tuples:
            out.write(b"".join(orjson.dumps(item) + b"\n" for item in fetch.tuples))
            state.received += len(fetch.tuples)
            if subscriber.source is not None and subscriber.source.rep:
                state.via_repeater += len(fetch.tuples)
        await asyncio.sleep(RECORD_LINGER_S)


async def record(workflow_path: Path, out_dir: Path, name: str, tight: bool) -> None:
    """Record output streams until told to drain (a line on stdin), then write ``<name>.json``.

    ``tight``: only the tight streams; otherwise every other output stream.
    """
    import aiohttp

    from pan.input.subscriber import StreamSubscriber
    from pan.workflow.parser import load_workflow
    from simulator.replay import output_streams

    workflow = load_workflow(workflow_path)
    chosen = set(tight_streams(workflow))
    streams = [s for s in output_streams(workflow) if (s in chosen) == tight]
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    states: dict[str, StreamRecord] = {}
    subscribers: dict[str, StreamSubscriber] = {}
    files: dict[str, IO[bytes]] = {}
    tasks = []
    for stream in streams:
        states[stream] = StreamRecord()
        files[stream] = (out_dir / f"{stream}.jsonl").open("wb")
        subscribers[stream] = StreamSubscriber(stream, workflow.repository.address, max_wait_ms=RECORD_WAIT_MS,
                                               page_size=RECORD_PAGE, session=session)
        tasks.append(asyncio.create_task(record_stream(stream, subscribers[stream], files[stream], states[stream]),
                                         name=f"record {stream}"))
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.readline)  # the driver's "drain": the data has ended
    quiet = await wait_quiet(states)
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    for stream, out in files.items():
        out.close()
        stats = subscribers[stream].stats
        states[stream].failovers, states[stream].errors = stats.failovers, stats.errors
    await session.close()
    summary = {"quiet": quiet, "streams": {name: asdict(state) for name, state in states.items()}}
    (out_dir / f"{name}.json").write_text(json.dumps(summary))
    print("done", flush=True)


async def wait_quiet(states: dict[str, StreamRecord]) -> bool:
    """True once no tuple arrived for ``QUIET_S``; False if still busy after ``MAX_DRAIN_S``."""
    deadline = time.monotonic() + MAX_DRAIN_S
    last_total, last_change = -1, time.monotonic()
    while time.monotonic() < deadline:
        total = sum(s.received for s in states.values())
        if total != last_total:
            last_total, last_change = total, time.monotonic()
        elif time.monotonic() - last_change >= QUIET_S:
            return True
        await asyncio.sleep(0.2)
    return False


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.chaos_recorder")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("record", help="record output streams of a workflow until a line arrives on stdin")
    p.add_argument("workflow", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--name", required=True, help="the summary goes to OUT/NAME.json")
    p.add_argument("--tight", action="store_true", help="only the tight streams (else all the others)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    eventloop.run(record(args.workflow, args.out, args.name, args.tight))
    return 0


if __name__ == "__main__":
    sys.exit(main())
