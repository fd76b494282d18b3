"""`pan dashboard`: serve the live match and network page of a running workflow."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import ssl
import sys

from aiohttp import web

from pan.commands.connect import TOKEN_ENV, ConnectError, add_connection_arguments, connection
from pan.repository.client import NotTrusted, Refused, RepositoryClient, RepositoryUnavailable
from pan.util import eventloop
from workers.dashboard.app import DEFAULT_DELAY_REFERENCE, build


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
        checking = asyncio.get_running_loop().create_task(report_access(repositories, token, tls))
        try:
            await stop.wait()
        finally:
            checking.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await checking
    finally:
        await live.close()
        await runner.cleanup()


async def report_access(repositories: list[tuple[str, int]], token: str | None, tls: ssl.SSLContext | None,
                        interval_s: float = 2.0) -> str | None:
    """Ask the repositories until one answers; if it refuses this dashboard (no or a wrong read token, an untrusted
    certificate), say so once on stderr and return the line: every page would stay empty otherwise. The pages
    are told too (frames' ``problems``); the dashboard keeps serving, so it shows data once the cause is fixed
    by a restart with the right options."""
    while True:
        for address in repositories:
            async with RepositoryClient(address, token=token, tls=tls, timeout_s=5.0) as repository:
                try:
                    await repository.streams()
                    return None
                except Refused as exc:
                    line = (f"pan dashboard: {exc}; a workflow with a secret needs its read token "
                            f"(--workflow FILE, --token-file PATH or ${TOKEN_ENV}): the page shows no data")
                except NotTrusted as exc:
                    line = f"pan dashboard: {exc}; --ca must name the workflow's CA: the page shows no data"
                except RepositoryUnavailable:
                    continue  # not up yet: the workflow may start after the dashboard
                print(line, file=sys.stderr, flush=True)
                return line
        await asyncio.sleep(interval_s)
