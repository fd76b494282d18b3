"""`pan receive`: the debugging stream receiver (``simulator.receiver``) on the command line."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

from pan.util import eventloop


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "receive",
        help="debugging stream receiver: prints the event-time spread of incoming sensors",
        description="Listen like a worker's ingest port and print, every --every seconds, one JSON line "
        "with the standard deviation of the sensors' latest timestamps and their median difference "
        "to the mean (ms), plus moving averages. Point a workflow's ingest_port here to verify WTT.",
    )
    p.add_argument("--port", type=int, required=True, help="TCP port to listen on (0 = any free port)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--every", type=float, default=5.0, help="seconds between reports (default 5)")
    p.add_argument("--window", type=int, default=10, help="reports in the moving averages (default 10)")
    p.add_argument("--count", type=int, help="exit after this many reports")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from simulator.receiver import serve

    if args.every <= 0 or args.window < 1 or (args.count is not None and args.count < 1):
        print("pan receive: --every must be > 0, --window and --count >= 1", file=sys.stderr)
        return 2

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        await serve(args.host, args.port, args.every, args.count, args.window, stop=stop)

    try:
        eventloop.run(main())
    except OSError as exc:
        print(f"pan receive: {exc}", file=sys.stderr)
        return 2
    return 0
