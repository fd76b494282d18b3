"""One peer: an OS process hosting some of a workflow's workers."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from pathlib import Path

from pan.config.specs import Workflow
from pan.config.trust import Trust
from pan.input.local import LocalPublishers
from pan.security.auth import AuthError
from pan.security.tls import TlsError
from pan.util import eventloop
from pan.worker.recovery import CheckpointError, StateOptions
from pan.worker.worker import Worker

log = logging.getLogger(__name__)


async def serve_peer(workflow: Workflow, peer: str, stop: asyncio.Event, state_dir: Path | None = None,
                     fresh_start: bool = False) -> None:
    """Start the peer's workers, wait for ``stop``, then stop them in reverse order. ``state_dir``: where the
    stateful workers keep their checkpoints (pan/worker/recovery.py)."""
    specs = workflow.peers().get(peer)
    if not specs:
        raise ValueError(f"workflow '{workflow.name}' has no peer named '{peer}'")
    trust = Trust.of(workflow)
    started: list[Worker] = []
    local = LocalPublishers()  # the peer's workers pull from each other without HTTP
    state = None if state_dir is None else StateOptions(state_dir, workflow.name, workflow.checkpoint_s, fresh_start)
    try:
        for spec in specs:
            worker = Worker(spec, workflow.repository, local=local, replicas=workflow.replicas, trust=trust,
                            lossless=workflow.delivery == "lossless", batched_pulls=workflow.pulls == "batched",
                            state=state)
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


def run_peer(workflow: Workflow, peer: str, state_dir: Path | None = None, fresh_start: bool = False) -> int:
    """Blocking entry point with SIGTERM/SIGINT handling for `pan peer`."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve_peer(workflow, peer, stop, state_dir, fresh_start)

    try:
        eventloop.run(main())
    except CheckpointError as exc:
        log.error("peer %s: %s (start it with --fresh-start to begin without it)", peer, exc)
        return 1
    except (OSError, AuthError, TlsError) as exc:
        log.error("peer %s failed to start: %s", peer, exc)
        return 1
    return 0
