"""Ask a workflow's workers how they are: which of their tasks ended with an error.

A worker whose input pull or component task failed goes on serving (the failure ends only that task),
so from outside it looks like a quiet stream. Its ``/health`` answers 503 with ``failed_tasks`` then,
and a driver that ran the workflow (``pan replay``) asks every worker before it calls the run a success.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import aiohttp
import orjson

from pan.config.specs import WorkerSpec, Workflow
from pan.config.trust import Trust
from pan.repository.client import http_url
from pan.security.tls import scheme

TIMEOUT_S = 30.0  # per answer: a loaded machine is slow, and this is asked once per run


async def failed_tasks(workflow: Workflow) -> dict[str, dict[str, str]]:
    """Worker -> its tasks that ended with an error -> the error, for the workers that say so.

    A worker that does not answer is left out: a peer that ended is the launcher's to report."""
    tls = Trust.of(workflow).client_tls()

    async def ask(session: aiohttp.ClientSession, worker: WorkerSpec) -> dict[str, str]:
        answer = await get_json(session, http_url(worker.host, worker.port, "/health", scheme(tls)), tls)
        failed = answer.get("failed_tasks") if isinstance(answer, dict) else None
        return {str(k): str(v) for k, v in failed.items()} if isinstance(failed, dict) else {}

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_S)) as session:
        answers = await asyncio.gather(*(ask(session, worker) for worker in workflow.workers))
    return {worker.name: failed for worker, failed in zip(workflow.workers, answers, strict=True) if failed}


async def get_json(session: aiohttp.ClientSession, url: Any, tls: ssl.SSLContext | None,
                   ok: tuple[int, ...] = (200, 503)) -> Any:
    """A worker's JSON answer with one of the ``ok`` statuses, or None (unreachable, another status, not JSON)."""
    try:
        async with session.get(url, ssl=tls if tls is not None else True) as response:
            if response.status not in ok:
                return None
            return orjson.loads(await response.read())
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
