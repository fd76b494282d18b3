"""One peer: an OS process hosting some of a workflow's workers."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal

from pan.config.specs import Workflow
from pan.config.trust import Trust
from pan.input.local import LocalPublishers
from pan.security.auth import AuthError
from pan.security.tls import TlsError
from pan.util import eventloop
from pan.worker.worker import Worker

log = logging.getLogger(__name__)


async def serve_peer(workflow: Workflow, peer: str, stop: asyncio.Event) -> None:
    """Start the peer's workers, wait for ``stop``, then stop them in reverse order."""
    specs = workflow.peers().get(peer)
    if not specs:
        raise ValueError(f"workflow '{workflow.name}' has no peer named '{peer}'")
    trust = Trust.of(workflow)
    started: list[Worker] = []
    local = LocalPublishers()  # the peer's workers pull from each other without HTTP
    try:
        for spec in specs:
            worker = Worker(spec, workflow.repository, local=local, replicas=workflow.replicas, trust=trust,
                            lossless=workflow.delivery == "lossless", batched_pulls=workflow.pulls == "batched")
            await worker.start()
            started.append(worker)
        # The ring buffers' slot lists hold millions of references. Left to the cyclic garbage
        # collector, every full collection walks them all (50-200 ms of CPU with the event loop
        # stalled); frozen, they are treated as permanent and never walked again.
        gc.freeze()
        log.info("peer %s: %d worker(s) running on %s", peer, len(started), eventloop.running_loop_name())
        await stop.wait()
    finally:
        for worker in reversed(started):
            await worker.stop()


def run_peer(workflow: Workflow, peer: str) -> int:
    """Blocking entry point with SIGTERM/SIGINT handling for `pan peer`."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve_peer(workflow, peer, stop)

    try:
        eventloop.run(main())
    except (OSError, AuthError, TlsError) as exc:
        log.error("peer %s failed to start: %s", peer, exc)
        return 1
    return 0
