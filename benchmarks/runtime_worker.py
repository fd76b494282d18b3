"""The worker process of `pan bench runtime`: a forwarder (plus a repository unless given one) until SIGTERM.

Run as ``python -m benchmarks.runtime_worker CONFIG_JSON`` by the benchmark
(benchmarks/runtime_bench.py); it prints one JSON line with its pid and
ports once it serves. CONFIG_JSON: ``streams``, ``buffer_size``, and
optionally ``column_buffers`` (default true), ``name``, ``repository_port``, ``secret`` (a workflow secret, text) and
``tls`` (``{"ca", "cert", "key"}`` as in a workflow, `pan bench security`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

import orjson

from pan.util import eventloop

if TYPE_CHECKING:
    from pan.config.specs import WorkerSpec

HOST = "127.0.0.1"


def forwarder_spec(name: str, streams: list[str], buffer_size: int, column_buffers: bool = True) -> WorkerSpec:
    """A forwarder on free ports whose output streams are fed through its TCP ingest port (``column_buffers``:
    its sensor streams hold int64 rows, the default, or JSON tuples)."""
    from pan.config.specs import WorkerSpec

    return WorkerSpec(name=name, type="forwarder", host=HOST, port=0, peer="bench", buffer_size=buffer_size,
                      params={"ingest_port": 0, "inter_pan_inputs": list(streams), "decoder": "debs_csv",
                              "column_buffers": column_buffers})


async def serve(config: dict[str, Any]) -> None:
    from pathlib import Path

    from pan.config.specs import RepositorySpec
    from pan.config.trust import Trust
    from pan.repository.server import RepositoryServer
    from pan.security.auth import Credentials
    from pan.security.tls import TlsFiles
    from pan.worker.worker import Worker

    tls = config.get("tls")
    trust = Trust(credentials=Credentials(config["secret"].encode()) if config.get("secret") else None,
                  tls=None if tls is None else TlsFiles(Path(tls["ca"]), tls["cert"], tls["key"]))
    repository = None
    repository_port = config.get("repository_port")
    if not repository_port:
        server_tls, client_tls = trust.server_tls(HOST), trust.client_tls()
        contexts = None if server_tls is None or client_tls is None else (server_tls, client_tls)
        repository = RepositoryServer(HOST, 0, credentials=trust.credentials, tls=contexts)
        await repository.start()
        repository_port = repository.port
    spec = forwarder_spec(config.get("name", "bench-forwarder"), config["streams"], int(config["buffer_size"]),
                          config.get("column_buffers", True))
    worker = Worker(spec, RepositorySpec(HOST, repository_port), trust=trust)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await worker.start()
    try:
        ready = {
            "pid": os.getpid(),
            "repository_port": repository_port,
            "worker_port": worker.server.port,
            "ingest_port": worker.component.ingest.port,  # type: ignore[attr-defined]
        }
        print(orjson.dumps(ready).decode(), flush=True)
        await stop.wait()
    finally:
        await worker.stop()
        if repository is not None:
            await repository.stop()


if __name__ == "__main__":
    from pan.launch.lifeline import die_with_launcher

    die_with_launcher()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    eventloop.run(serve(orjson.loads(sys.argv[1])))
