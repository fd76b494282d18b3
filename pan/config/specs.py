"""What a workflow describes, as plain values: the repository, the workers, the workflow.

Kept apart from the parser (``pan.workflow.parser``) so that components and the
worker can use the specs without importing the validation, which needs the
component catalogue.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pan.buffers.streams import DEFAULT_BUFFER_BYTES, DEFAULT_BUFFER_SIZE
from pan.security.auth import SecretSource
from pan.security.tls import TlsFiles

DEFAULT_REFRESH_MS = 2000


class WorkflowError(Exception):
    def __init__(self, problems: list[str], source: str = "workflow") -> None:
        super().__init__(f"{source}: " + "; ".join(problems))
        self.problems = problems
        self.source = source


@dataclass(frozen=True)
class RepositorySpec:
    host: str = "127.0.0.1"
    port: int = 8080
    refresh_ms: int = DEFAULT_REFRESH_MS

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass
class WorkerSpec:
    name: str
    type: str
    host: str
    port: int
    peer: str
    inputs: list[str] = field(default_factory=list)
    buffer_size: int = DEFAULT_BUFFER_SIZE
    #: Byte budget of each output stream, next to its tuple count (pan.buffers.streams.DEFAULT_BUFFER_BYTES).
    buffer_bytes: int = DEFAULT_BUFFER_BYTES
    params: dict[str, Any] = field(default_factory=dict)
    #: The ordering unit's mode (``{"mode": "speculative", "alpha": 0.33}``, pan/ordering/speculation_settings.py);
    #: None: buffering.
    ordering: dict[str, Any] | None = None


@dataclass
class Workflow:
    name: str
    repository: RepositorySpec
    workers: list[WorkerSpec]
    source: str = "workflow"
    #: Where the secret that closes the repository and the workers lives (pan.security.auth); None: open, as before.
    auth: SecretSource | None = None
    #: Further repositories beside ``repository``: publishers register with every one, subscribers ask any.
    replicas: list[RepositorySpec] = field(default_factory=list)
    #: The only hosts publishers may be on (``allowed_hosts``): repositories refuse others, workers never pull
    #: from others. None: any host.
    allowed_hosts: frozenset[str] | None = None
    #: HTTPS for the repositories and workers, with these certificates (pan.security.tls); None: plain HTTP.
    tls: TlsFiles | None = None
    #: ``live`` (default): a worker that falls behind a publisher's ring buffer skips ahead and reports what it
    #: missed. ``lossless``: every worker input asks its publisher to hold what it has not read yet (the ring
    #: grows instead), so a slow worker delays the stream and loses nothing; for replays of recorded data.
    delivery: str = "live"
    #: ``batched`` (default): a worker's pulls of one publisher asked for in the same event-loop round share one
    #: ``POST /pages`` (pan/input/page_batches.py): fewer requests, so less CPU and a shorter query delay where most
    #: pulls cross processes (docs/benchmarks.md, "Distribution"). ``per_stream``: one `/data` long poll per input.
    #: Over Arrow (``PAN_WIRE=arrow``) every pull is per stream: a batched answer is JSON.
    pulls: str = "batched"
    #: Stateful workers take a checkpoint every this many seconds of event time, when their peer runs with a
    #: state directory (``pan run --state-dir``; pan/components/checkpoints.py). None: no checkpoints.
    checkpoint_s: float | None = None

    @property
    def repositories(self) -> list[RepositorySpec]:
        """Every repository of the workflow, the first one first."""
        return [self.repository, *self.replicas]

    @property
    def repository_addresses(self) -> list[tuple[str, int]]:
        return [(r.host, r.port) for r in self.repositories]

    def peers(self) -> dict[str, list[WorkerSpec]]:
        grouped: dict[str, list[WorkerSpec]] = {}
        for worker in self.workers:
            grouped.setdefault(worker.peer, []).append(worker)
        return grouped

    def worker(self, name: str) -> WorkerSpec:
        for spec in self.workers:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def ingest_receiver(self, stream: str) -> WorkerSpec | None:
        """The worker (a forwarder) whose TCP ingest port receives ``stream`` from outside PAN."""
        for spec in self.workers:
            if stream in inter_pan_inputs(spec):
                return spec
        return None


# A forwarder's own keys live in its params (checked by its component type); these read them.


def ingest_port(spec: WorkerSpec) -> int | None:
    """``params.ingest_port``: the TCP port a forwarder receives rows on; None for other workers."""
    port = spec.params.get("ingest_port")
    return port if isinstance(port, int) and not isinstance(port, bool) else None


def inter_pan_inputs(spec: WorkerSpec) -> list[str]:
    """``params.inter_pan_inputs``: the streams a forwarder receives from outside PAN; empty for other workers."""
    streams = spec.params.get("inter_pan_inputs", [])
    return [s for s in streams if isinstance(s, str)] if isinstance(streams, list) else []
