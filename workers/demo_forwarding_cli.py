"""`pan demo-forwarding`: a forwarder and two repeaters fed with a built-in sample.

It starts the workflow with `pan run` (real processes), replays the sample
rows into the forwarder's ingest port in event-time pace, and shows clients
receiving every stream through whichever publisher the repository picked.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import orjson

from pan.config.specs import Workflow, WorkflowError, ingest_port, inter_pan_inputs
from pan.ingest.server import send_lines
from pan.input.subscriber import StreamSubscriber
from pan.launch.launcher import is_local_host, repositories_to_start
from pan.launch.lifeline import Lifeline
from pan.repository.client import RepositoryClient
from pan.util import eventloop
from pan.workflow.parser import load_workflow
from pan.workflow.preflight import ports_in_use
from workers import shipped

DEFAULT_WORKFLOW = shipped.workflow("demo_forwarding.json")
DEFAULT_ROWS = shipped.demo_rows()
PICOS_PER_SECOND = 10**12


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("demo-forwarding", help="a forwarder and two repeaters on a built-in sample")
    p.add_argument("--workflow", default=str(DEFAULT_WORKFLOW), help="workflow file")
    p.add_argument("--rows", default=str(DEFAULT_ROWS), help="DEBS CSV rows to replay")
    p.add_argument("--speedup", type=float, default=1.0, help="replay speed relative to event time")
    p.set_defaults(handler=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    try:
        workflow = load_workflow(args.workflow)
        lines = Path(args.rows).read_bytes().splitlines()
    except WorkflowError as exc:
        print(f"pan demo-forwarding: --workflow {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"pan demo-forwarding: --rows {args.rows}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    taken = ports_in_use(workflow, is_local_host, repositories_to_start(workflow))
    if taken:
        print(f"pan demo-forwarding: port(s) in use: {', '.join(taken)} (another demo or `pan run`?)",
              file=sys.stderr)
        return 1
    with Lifeline() as lifeline:  # the workflow dies with us, even if we are SIGKILLed
        run = subprocess.Popen([sys.executable, "-m", "pan", "run", args.workflow], **lifeline.spawn_options())
        try:
            return eventloop.run(_demo(workflow, lines, args.speedup))
        finally:
            run.send_signal(signal.SIGTERM)
            run.wait(timeout=30)


async def _wait_for_publishers(workflow: Workflow, streams: list[str], timeout_s: float = 30.0) -> None:
    wanted = sum(1 for w in workflow.workers if set(streams) & {*w.inputs, *inter_pan_inputs(w)})
    async with RepositoryClient((workflow.repository.host, workflow.repository.port)) as repository:
        await repository.wait_for_publishers(streams, timeout_s, publishers=wanted)


async def _replay(host: str, port: int, lines: list[bytes], speedup: float) -> None:
    """Send rows in event-time pace, in slices of 10 ms of event time."""
    first_ts = int(lines[0].split(b",")[1])
    started = time.monotonic()
    step = PICOS_PER_SECOND // 100
    batch: list[bytes] = []
    slice_end = first_ts + step
    for line in [*lines, b""]:
        ts = int(line.split(b",")[1]) if line else None
        if ts is None or ts >= slice_end:
            delay = (slice_end - first_ts) / PICOS_PER_SECOND / speedup - (time.monotonic() - started)
            if delay > 0:
                await asyncio.sleep(delay)
            await send_lines(host, port, batch)
            batch, slice_end = [], slice_end + step
        if line:
            batch.append(line)


async def _demo(workflow: Workflow, lines: list[bytes], speedup: float) -> int:
    forwarder = next(w for w in workflow.workers if ingest_port(w) is not None)
    streams = inter_pan_inputs(forwarder)
    sent = Counter(f"SENSOR{line.split(b',', 1)[0].decode()}" for line in lines)
    await _wait_for_publishers(workflow, streams)
    print(f"workflow '{workflow.name}' is up; replaying {len(lines)} rows at {speedup}x", flush=True)

    received: Counter[str] = Counter()
    sources: dict[str, str] = {}

    async def consume(stream: str) -> None:
        async with StreamSubscriber(stream, workflow.repository.address, max_wait_ms=200) as sub:
            async for batch in sub.batches():
                received[stream] += len(batch)
                if sub.source is not None:
                    sources[stream] = f"{sub.source.endpoint} (level {sub.source.lvl})"
                if stream == "SENSOR105":
                    for item in (t for t in batch if t["i"] % 40 == 0):
                        print("  SENSOR105", orjson.dumps(item).decode(), flush=True)
                if received[stream] >= sent[stream]:
                    return

    consumers = [asyncio.create_task(consume(s)) for s in streams]
    try:
        await _replay(forwarder.host, ingest_port(forwarder) or 0, lines, speedup)
        await asyncio.wait_for(asyncio.gather(*consumers), timeout=30)
    except TimeoutError:
        pass
    finally:
        for task in consumers:
            task.cancel()
        await asyncio.gather(*consumers, return_exceptions=True)

    print(f"\n{'stream':<10} {'sent':>6} {'received':>9}  publisher used")
    for stream in streams:
        print(f"{stream:<10} {sent[stream]:>6} {received[stream]:>9}  {sources.get(stream, '-')}")
    complete = all(received[s] == sent[s] for s in streams)
    print("\nall rows received" if complete else "\nSOME ROWS WERE NOT RECEIVED", flush=True)
    return 0 if complete else 1
