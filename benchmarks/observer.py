"""The client process of `pan bench query-delay`: notes when each tuple of some streams arrives.

It runs apart from the sensor simulator, as clients and sensors would in a
deployment: in one event loop, sending sensor rows would delay noting an
arrival and inflate every delay measured.

    python -m benchmarks.observer --repository HOST:PORT --out FILE STREAM...

Prints ``ready`` once its loop runs, then writes ``stream,ts,receive_ns``
lines to FILE until SIGTERM or SIGINT. With ``--view raw`` (`pan bench speculation`) it reads
speculative streams before they settle: each line is ``stream,ts,receive_ns,index``, and a
retraction is ``stream,R,receive_ns,after`` (the tuples after ``after`` are withdrawn and read again);
``read_kept_arrivals`` keeps, per index, the arrival of the tuple that was not withdrawn.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
from pathlib import Path
from typing import TextIO

from pan.input.subscriber import StreamSubscriber
from pan.util import eventloop

LOOKUP_BACKOFF_S = (0.01, 0.05)  # find each stream soon after its producer registers


async def watch(stream: str, repository: str, out: TextIO, view: str = "settled") -> None:
    raw = view == "raw"
    async with StreamSubscriber(stream, repository, max_wait_ms=1000, retry_backoff_s=LOOKUP_BACKOFF_S,
                                view=view, gaps=raw) as sub:
        async for batch in sub.batches():
            now = time.time_ns()
            if not raw:
                out.write("".join(f"{stream},{item['ts']},{now}\n" for item in batch))
                continue
            out.write("".join(f"{stream},R,{now},{item['retract']['after']}\n" if "retract" in item
                              else f"{stream},{item['ts']},{now},{item['i']}\n" for item in batch if "i" in item
                              or "retract" in item))


async def observe(repository: str, streams: list[str], path: Path, view: str = "settled") -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    with path.open("w", buffering=1 << 20) as out:  # a local file, written in bulk
        tasks = [asyncio.create_task(watch(stream, repository, out, view), name=f"watch {stream}")
                 for stream in streams]
        print("ready", flush=True)
        await stop.wait()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def read_arrivals(path: Path, streams: list[str]) -> dict[str, list[tuple[int, int]]]:
    """(ts, receive ns) per stream, from an observer's output file."""
    received: dict[str, list[tuple[int, int]]] = {stream: [] for stream in streams}
    for line in path.read_text().splitlines():
        stream, ts, now = line.split(",")
        received[stream].append((int(ts), int(now)))
    return received


def read_kept_arrivals(path: Path, streams: list[str]) -> tuple[dict[str, list[tuple[int, int]]], dict[str, int]]:
    """From a ``--view raw`` file: (ts, receive ns) per stream of the tuples that were never withdrawn, each
    with the time its final version arrived, in index order; and the retractions each stream saw."""
    kept: dict[str, dict[int, tuple[int, int]]] = {stream: {} for stream in streams}
    retractions = dict.fromkeys(streams, 0)
    for line in path.read_text().splitlines():
        stream, ts, now, index = line.split(",")
        held = kept[stream]
        if ts == "R":
            retractions[stream] += 1
            after = int(index)
            for i in [i for i in held if i > after]:
                del held[i]
        else:
            held[int(index)] = (int(ts), int(now))
    return {stream: [held[i] for i in sorted(held)] for stream, held in kept.items()}, retractions


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.observer", description=__doc__.splitlines()[0])
    parser.add_argument("--repository", required=True, help="HOST:PORT")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--view", choices=("settled", "raw"), default="settled",
                        help="raw: a speculative stream's tuples before they settle, and its retractions")
    parser.add_argument("streams", nargs="+")
    args = parser.parse_args()
    eventloop.run(observe(args.repository, args.streams, args.out, args.view))


if __name__ == "__main__":
    main()
