"""A plain TCP receiver that records every line a simulator sends, and a workflow that routes to it."""

from __future__ import annotations

import asyncio
import time

import orjson

from pan.config.specs import Workflow
from tests.conftest import forwarder, free_port, make_workflow


class Recorder:
    """A plain TCP receiver: keeps every connection's lines with their arrival time (ns, local clock)."""

    def __init__(self) -> None:
        self.connections: list[list[tuple[int, bytes]]] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        lines: list[tuple[int, bytes]] = []
        self.connections.append(lines)
        while line := await reader.readline():
            lines.append((time.time_ns(), line))
        writer.close()

    def lines(self) -> list[tuple[int, bytes]]:
        """Every data line (promise lines, which carry no row, left out)."""
        return [x for conn in self.connections for x in conn if b'"promise":true' not in x[1]]

    def promises(self) -> list[dict]:
        return [orjson.loads(x[1]) for conn in self.connections for x in conn if b'"promise":true' in x[1]]


def recorder_workflow(rec: Recorder, streams: list[str]) -> Workflow:
    return make_workflow(free_port(), [forwarder("R", streams, ingest_port=rec.port)])
