"""The client process of `pan bench query-delay`: notes when each tuple of some streams arrives.

It runs apart from the sensor simulator, as clients and sensors would in a
deployment: in one event loop, sending sensor rows would delay noting an
arrival and inflate every delay measured.

    python -m benchmarks.observer --repository HOST:PORT --out FILE STREAM...

Prints ``ready`` once its loop runs, then writes ``stream,ts,receive_ns``
lines to FILE until SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
from pathlib import Path
from typing import TextIO

from pan import eventloop
from pan.client import StreamSubscriber

LOOKUP_BACKOFF_S = (0.01, 0.05)  # find each stream soon after its producer registers


async def watch(stream: str, repository: str, out: TextIO) -> None:
    async with StreamSubscriber(stream, repository, max_wait_ms=1000, retry_backoff_s=LOOKUP_BACKOFF_S) as sub:
        async for batch in sub.batches():
            now = time.time_ns()
            out.write("".join(f"{stream},{item['ts']},{now}\n" for item in batch))


async def observe(repository: str, streams: list[str], path: Path) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    with path.open("w", buffering=1 << 20) as out:  # a local file, written in bulk
        tasks = [asyncio.create_task(watch(stream, repository, out), name=f"watch {stream}") for stream in streams]
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


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.observer", description=__doc__.splitlines()[0])
    parser.add_argument("--repository", required=True, help="HOST:PORT")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("streams", nargs="+")
    args = parser.parse_args()
    eventloop.run(observe(args.repository, args.streams, args.out))


if __name__ == "__main__":
    main()
