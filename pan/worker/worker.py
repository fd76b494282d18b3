"""The worker runtime: one component between input and output ring buffers.

The worker owns the lifecycle only; what it serves is its ``WorkerApi``
(pan/worker/api.py) and what it registers is its ``Lease`` (pan/repository/client.py).
``start`` runs, in this order so that nobody ever subscribes to a stream that is not
served yet:

1. serve HTTP and let the component acquire its resources;
2. publish every output to the repository (soft state, refreshed forever);
3. start one pull task per input (``InputChannel.pull``, pan/input/channel.py), the
   component's own task and the lease refresh, all in one ``asyncio.TaskGroup``.

``stop`` cancels that group (which awaits every task), then releases the rest in
reverse. A task that fails is logged and the others go on, as a worker with one
broken input still serves the rest. The repository may be down at any time:
publishing is retried on the next refresh and the pull tasks only need it to find
a new publisher.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import uuid
from collections.abc import Coroutine, Sequence
from typing import Any

import aiohttp

from pan.buffers.ringbuffer import RingBuffer
from pan.components.base import Component, ComponentContext
from pan.components.catalog import get_component_type
from pan.config.specs import RepositorySpec, WorkerSpec
from pan.config.trust import OPEN, Trust
from pan.http.server import HttpServer
from pan.input.channel import InputChannel
from pan.input.local import LocalPublishers
from pan.input.page_batches import PageBatcher
from pan.input.subscriber import StreamSubscriber
from pan.repository.client import Lease, Registration, RepositoryClient
from pan.wire.progress import EMPTY, StreamProgress
from pan.worker.api import WorkerApi
from pan.worker.recovery import Resumed, StateOptions, resume

PULL_WAIT_MS = 1000
PULL_TIMEOUT_S = 5.0  # beyond the long poll's wait
PULL_PAGE = 10_000  # a worker (e.g. a repeater) must drain a fast stream in few round trips
INPUT_BUFFER_MIN = 20_000  # tuples per input stream
REPOSITORY_TIMEOUT_S = 2.0


class Worker:
    """One component, its input and output streams, its HTTP API and its lease: started and stopped as one."""

    def __init__(
        self,
        spec: WorkerSpec,
        repository: RepositorySpec,
        *,
        epoch: str | None = None,
        local: LocalPublishers | None = None,
        replicas: Sequence[RepositorySpec] = (),
        trust: Trust = OPEN,
        lossless: bool = False,
        batched_pulls: bool = True,
        state: StateOptions | None = None,
    ) -> None:
        """``replicas``: the workflow's further repositories, which the lease also registers with and the pulls
        also ask. ``trust``: the workflow's secret (the API then needs the read token, the lease is signed and
        the pulls show the token), allowed hosts (the only ones pulled from) and TLS (HTTPS both ways).
        ``lossless``: the workflow's ``delivery`` is ``lossless``; every input holds its publisher's unread tuples
        (``/data?hold=``) instead of skipping what was overwritten. ``batched_pulls``: the workflow's ``pulls``
        is ``batched``; the inputs' pages from one publisher go in one ``POST /pages`` (pan/input/page_batches.py)."""
        component_type = get_component_type(spec.type)
        if component_type is None:
            raise ValueError(f"unknown worker type {spec.type!r}")
        self.spec = spec
        self.repository = repository
        self.repositories = [(r.host, r.port) for r in (repository, *replicas)]
        self.local = local  # this peer's directory of in-process publishers, if any
        self.trust = trust
        self.lossless = lossless
        self.epoch = epoch or uuid.uuid4().hex[:16]
        self.log = logging.getLogger(f"pan.worker.worker.{spec.name}")
        self.level = component_type.repeater_level(spec)
        self.rep = component_type.repeats
        producer = EMPTY if self.rep else StreamProgress(epoch=self.epoch)  # a repeater passes its source's on
        self.outputs = {
            name: component_type.make_output(spec, name, producer) for name in component_type.output_names(spec)
        }
        # Input buffers are not sized by ``buffer_size`` (which is for outputs): a component that
        # lags its pull task must not lose input because the worker keeps few outputs.
        input_capacity = max(spec.buffer_size, INPUT_BUFFER_MIN)
        self.inputs = {
            name: InputChannel(name, RingBuffer(input_capacity)) for name in component_type.input_names(spec)
        }
        self.component: Component = component_type(
            ComponentContext(spec=spec, inputs=self.inputs, outputs=self.outputs, log=self.log)
        )
        # ``state``: the peer's state directory; a stateful worker restores its newest checkpoint (keeping its
        # outputs' epoch and indices) and takes checkpoints from now on (pan/worker/recovery.py).
        self.resumed = Resumed() if state is None else resume(self.component, spec, self.inputs, self.outputs, state,
                                                               self.log)
        if self.resumed.epoch is not None:
            self.epoch = self.resumed.epoch
        self.api = WorkerApi(self)
        self.server = HttpServer(self.api.app, spec.host, spec.port, ssl_context=trust.server_tls(spec.host))
        self._session: aiohttp.ClientSession | None = None
        self.batched_pulls = batched_pulls
        self._batcher: PageBatcher | None = None  # made with the session
        self._tasks: asyncio.Task[None] | None = None  # runs the TaskGroup of pulls, component and lease
        self.lease: Lease | None = None  # the outputs' registration, once the port is known
        #: Tasks that ended with an error (task -> the error): the worker serves on, but says so in /health
        #: and /streams, since a dead input pull or component would otherwise look like a quiet stream.
        self.failed_tasks: dict[str, str] = {}

    @property
    def endpoint(self) -> str:
        return f"{self.spec.host}:{self.server.port}"

    # --- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        if self.batched_pulls:
            self._batcher = PageBatcher(self._session, request_timeout_s=PULL_TIMEOUT_S, token=self.trust.token,
                                        tls=self.trust.client_tls())
        await self.server.start()
        if self.local is not None:
            self.local.register(self.spec.host, self.server.port, self.api.serve_local)
        await self.component.start()
        registration = Registration(
            tuple(self.outputs), self.spec.host, self.server.port, self.rep, self.level, 3 * self.repository.refresh_ms
        )
        clients = [
            RepositoryClient(address, session=self._session, timeout_s=REPOSITORY_TIMEOUT_S,
                             credentials=self.trust.credentials, tls=self.trust.client_tls())
            for address in self.repositories
        ]
        self.lease = Lease(clients, registration, self.repository.refresh_ms / 1000, self.log)
        await self.lease.publish()
        self._tasks = asyncio.create_task(self._run_tasks(self.lease), name=f"{self.spec.name}: tasks")
        self.log.info("started %s on %s (epoch %s)", self.spec.type, self.endpoint, self.epoch)

    async def stop(self) -> None:
        if self.local is not None:  # first, so that neighbours fail over exactly as over HTTP
            self.local.unregister(self.spec.host, self.server.port)
        for output in self.outputs.values():
            output.buffer.wake_all()  # answer pending long polls now rather than at their timeout
        if self._tasks is not None:
            self._tasks.cancel()  # the group cancels and awaits every task it owns
            with contextlib.suppress(asyncio.CancelledError):
                await self._tasks
            self._tasks = None
        await self.component.stop()
        if self.lease is not None:
            with contextlib.suppress(Exception):
                await self.lease.release()
        if self._batcher is not None:
            await self._batcher.close()
            self._batcher = None
        if self._session is not None:
            await self._session.close()
            self._session = None
        await self.server.stop()
        inputs = {
            key: sum(getattr(stream.counters, key) for stream in self.inputs.values())
            for key in ("received", "missed", "resets", "failovers")
        }
        self.log.info("stopped: %s", _summary({**self.component.counters(), "inputs": inputs}))

    async def _run_tasks(self, lease: Lease) -> None:
        """The worker's tasks, owned by one group: one pull per input, the component, the lease refresh."""
        async with asyncio.TaskGroup() as group:
            for name, channel in self.inputs.items():
                self._spawn(group, channel.pull(self._subscriber(name), PULL_PAGE), f"pull {name}")
            self._spawn(group, self.component.run(), "component")
            self._spawn(group, lease.keep(), "refresh")

    def _spawn(self, group: asyncio.TaskGroup, coro: Coroutine[Any, Any, None], what: str) -> None:
        name = f"{self.spec.name}: {what}"
        group.create_task(self._logged(coro, name), name=name)

    async def _logged(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``coro``; a failure is logged, kept in ``failed_tasks`` and ends only this task, not the group."""
        try:
            await coro
        except Exception as error:
            self.log.exception("task %r failed", name)
            self.failed_tasks[name] = f"{type(error).__name__}: {error}"[:500]

    # --- data plane ---------------------------------------------------------------

    def _subscriber(self, name: str) -> StreamSubscriber:
        """How input ``name`` is fetched: from the earliest tuple (or after a restored checkpoint's position), from
        any publisher but this worker (and, for a repeater, only from publishers below its level)."""
        position, epoch = self.resumed.inputs.get(name, (None, None))
        subscriber = StreamSubscriber(
            name,
            self.repositories,
            start="earliest" if position is None else position,
            reset="earliest",
            max_wait_ms=PULL_WAIT_MS,
            page_size=PULL_PAGE,
            below_level=self.level if self.rep else None,
            exclude=(self.endpoint,),
            session=self._session,
            local=self.local,
            wake_on_meta=True,  # K notices and watermarks must reach this worker's ordering unit at once
            token=self.trust.token,
            allowed_hosts=self.trust.allowed_hosts,
            tls=self.trust.client_tls(),
            hold=hold_name(self.spec.name) if self.lossless else None,
            view="raw" if self.component.reads_raw(self.spec) else "settled",
            request_timeout_s=PULL_TIMEOUT_S,
            batcher=self._batcher,
            # A component that computes on columns reads Arrow pages (its rows go to its row store).
            columns="prefer" if self.inputs[name].row_store is not None else False,
        )
        if epoch is not None:  # a producer that restarted since the checkpoint is a reset, reported as one
            subscriber.state.epoch = epoch
        return subscriber


def hold_name(worker: str) -> str:
    """The name a worker's inputs hold under (``/data?hold=`` takes 1-64 of ``A-Za-z0-9._:-``): readable, and as
    unique as the worker names of a workflow."""
    readable = re.sub(r"[^A-Za-z0-9._:-]", "_", worker)[:40]
    return f"{readable}-{hashlib.sha256(worker.encode()).hexdigest()[:12]}"


def _summary(counters: dict[str, Any]) -> str:
    """The non-zero numbers among a component's counters, one level of nesting flattened (a last word in logs)."""
    flat: dict[str, Any] = {}
    for key, value in counters.items():
        items = value.items() if isinstance(value, dict) else [(None, value)]
        for sub, v in items:
            if isinstance(v, int | float) and not isinstance(v, bool) and v:
                flat[key if sub is None else f"{key}.{sub}"] = v
    return " ".join(f"{k}={v}" for k, v in flat.items()) or "no counts"
