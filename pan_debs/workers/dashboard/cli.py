"""`pan dashboard`: serve the live match and network page of a running workflow."""

from __future__ import annotations

import argparse
import asyncio
import signal
import ssl
import sys

from aiohttp import web

from pan import eventloop
from pan.commands.connect import ConnectError, add_connection_arguments, connection
from pan_debs.workers.dashboard.app import DEFAULT_DELAY_REFERENCE, build


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser("dashboard", help="a live web page of a running full-game workflow")
    add_connection_arguments(p)
    p.add_argument("--host", default="127.0.0.1", help="address to serve on (default: %(default)s)")
    p.add_argument("--port", type=int, default=8765, help="port to serve on (default: %(default)s)")
    p.add_argument("--delay-reference", default=DEFAULT_DELAY_REFERENCE, metavar="STREAM",
                   help="input stream query delays are measured against (default: %(default)s)")
    p.set_defaults(handler=cmd_dashboard)


def cmd_dashboard(args: argparse.Namespace) -> int:
    try:
        conn = connection(args)
    except ConnectError as exc:
        print(f"pan dashboard: {exc}", file=sys.stderr)
        return 2
    if not 0 <= args.port <= 65535:
        print(f"pan dashboard: --port must be in 0..65535, got {args.port}", file=sys.stderr)
        return 2
    try:
        eventloop.run(serve(conn.repositories, conn.token, conn.tls, args.host, args.port, args.delay_reference))
    except OSError as exc:
        print(f"pan dashboard: cannot serve on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


async def serve(repositories: list[tuple[str, int]], token: str | None, tls: ssl.SSLContext | None, host: str,
                port: int, delay_reference: str = DEFAULT_DELAY_REFERENCE, *, signals: bool = True) -> None:
    """Serve until Ctrl-C or SIGTERM (``signals``) or until cancelled, then close every PAN subscription."""
    stop = asyncio.Event()
    if signals:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    live = build(repositories, token=token, tls=tls, delay_reference=delay_reference)
    runner = web.AppRunner(live.app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1] if runner.addresses else port
        print(f"dashboard on http://{host}:{bound}/ (repository {','.join(f'{h}:{p}' for h, p in repositories)})",
              flush=True)
        await stop.wait()
    finally:
        await live.close()
        await runner.cleanup()
