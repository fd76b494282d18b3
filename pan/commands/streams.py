"""`pan streams`: what a running workflow publishes, like ``kcat -L``.

One line per stream: its publishers (producer or repeater, level,
address), and, measured over ``--interval`` seconds on its original
producer's ``/streams``, the tuples it appends per second and its newest
index. ``--json`` prints the same as one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

import aiohttp
import orjson

from pan.commands.connect import ConnectError, Connection, add_connection_arguments, connection, registered_streams
from pan.repository.client import Publisher, http_url
from pan.security.auth import bearer
from pan.security.tls import scheme
from pan.util import eventloop

WORKER_TIMEOUT_S = 5.0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("streams", help="list a running workflow's streams, publishers and rates")
    add_connection_arguments(p)
    p.add_argument("--interval", type=float, default=1.0, metavar="S",
                   help="measure rates over this many seconds (0: no rates; default: %(default)s)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    p.set_defaults(handler=cmd_streams)


async def producer_outputs(session: aiohttp.ClientSession, conn: Connection, host: str, port: int) -> dict[str, Any]:
    """A worker's outputs from its ``/streams`` (empty if it does not answer)."""
    try:
        async with session.get(http_url(host, port, "/streams", scheme(conn.tls)), headers=bearer(conn.token),
                               timeout=aiohttp.ClientTimeout(total=WORKER_TIMEOUT_S),
                               **({} if conn.tls is None else {"ssl": conn.tls})) as answer:
            if answer.status != 200:
                return {}
            return orjson.loads(await answer.read()).get("outputs", {})
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
        return {}


async def measure(conn: Connection, streams: dict[str, list[Publisher]], interval_s: float) -> dict[str, Any]:
    """Per stream: publishers, newest index and tuples/s on its producer (None where it did not answer)."""
    producers = sorted({(p["host"], p["port"]) for pubs in streams.values() for p in pubs if not p.get("rep")})
    async with aiohttp.ClientSession() as session:
        async def snapshot() -> dict[str, dict[str, Any]]:
            answers = await asyncio.gather(*(producer_outputs(session, conn, h, p) for h, p in producers))
            return {name: out for outputs in answers for name, out in outputs.items()}

        before = await snapshot()
        after = before
        if interval_s > 0:
            await asyncio.sleep(interval_s)
            after = await snapshot()
    rows = {}
    for name, publishers in sorted(streams.items()):
        now, then = after.get(name), before.get(name)
        rate = None
        if interval_s > 0 and now is not None and then is not None:
            rate = round((now.get("appended", 0) - then.get("appended", 0)) / interval_s, 1)
        rows[name] = {"publishers": sorted(publishers, key=lambda p: (p.get("lvl", 0), p["host"], p["port"])),
                      "last": None if now is None else now.get("last"), "tuples_per_s": rate}
    return rows


def table(rows: dict[str, Any]) -> str:
    lines = [("STREAM", "LAST", "TUPLES/S", "PUBLISHERS")]
    for name, row in rows.items():
        publishers = ", ".join(f"{'rep' if p.get('rep') else 'producer'}@{p['host']}:{p['port']}"
                               + (f" lvl {p['lvl']}" if p.get("rep") else "") for p in row["publishers"])
        lines.append((name, "-" if row["last"] is None else str(row["last"]),
                      "-" if row["tuples_per_s"] is None else f"{row['tuples_per_s']:,}", publishers))
    widths = [max(len(line[col]) for line in lines) for col in range(3)]
    return "\n".join(f"{a:<{widths[0]}}  {b:>{widths[1]}}  {c:>{widths[2]}}  {d}" for a, b, c, d in lines)


def cmd_streams(args: argparse.Namespace) -> int:
    if args.interval < 0:
        print("pan streams: --interval must be >= 0", file=sys.stderr)
        return 2
    try:
        conn = connection(args)
    except ConnectError as exc:
        print(f"pan streams: {exc}", file=sys.stderr)
        return 2

    async def main() -> dict[str, Any]:
        streams = await registered_streams(conn, args.connect_timeout)
        return await measure(conn, streams, args.interval)

    try:
        rows = eventloop.run(main())
    except ConnectError as exc:
        print(f"pan streams: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(orjson.dumps({"repositories": conn.shown, "streams": rows}).decode())
    elif rows:
        print(table(rows))
    else:
        print(f"the repository at {conn.shown} lists no stream", file=sys.stderr)
    return 0
