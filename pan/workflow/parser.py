"""Workflow files: loading and validation into the specs (``pan.config.specs``) the launcher uses.

Validation collects every problem instead of stopping at the first, and each
message names the worker and key at fault, so a user can fix a file in one go.

Old-style files, which gave a forwarder's ``ingest_port`` and
``inter_pan_inputs`` next to its name instead of in its ``params``, still
load: the keys are moved, and one deprecation warning says where each went.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from pan.buffers.streams import DEFAULT_BUFFER_BYTES, DEFAULT_BUFFER_SIZE
from pan.components.catalog import get_component_type
from pan.config.specs import DEFAULT_REFRESH_MS, RepositorySpec, WorkerSpec, Workflow, WorkflowError
from pan.http.addresses import is_host
from pan.ingest.decoders import claiming_decoder
from pan.security.auth import SecretSource
from pan.security.tls import TlsFiles

MAX_BUFFER_SIZE = 10_000_000
MIN_BUFFER_BYTES = 1024  # per output stream; the newest tuple is kept even if larger
MAX_BUFFER_BYTES = 2**40

log = logging.getLogger(__name__)

__all__ = ["RepositorySpec", "WorkerSpec", "Workflow", "WorkflowError", "load_workflow", "on_free_ports",
           "parse_workflow"]

TOP_KEYS = {"name", "description", "repository", "workers", "auth", "allowed_hosts", "tls", "delivery", "pulls",
            "checkpoint_s"}
MAX_CHECKPOINT_S = 3600.0
DELIVERIES = ("live", "lossless")
PULLS = ("batched", "per_stream")
TLS_KEYS = {"ca", "cert", "key"}
AUTH_KEYS = {"secret_file", "secret_env"}
REPOSITORY_KEYS = {"host", "port", "refresh_ms"}
WORKER_REQUIRED = ("name", "type", "host", "port")
WORKER_KEYS = set(WORKER_REQUIRED) | {"peer", "inputs", "buffer_size", "buffer_bytes", "params", "ordering"}
#: Keys old-style files gave at the worker's top level; they belong in its params (the forwarder's own keys).
MOVED_TO_PARAMS = ("ingest_port", "inter_pan_inputs")


def on_free_ports(data: dict[str, Any]) -> dict[str, Any]:
    """A workflow description moved to ports that are free on this machine (tests, benchmarks)."""
    from pan.http.addresses import free_ports

    def has_ingest_port(worker: dict[str, Any]) -> bool:
        return "ingest_port" in worker or "ingest_port" in worker.get("params", {})

    repositories = data.get("repository", {})
    several = isinstance(repositories, list)
    repositories = repositories if several else [repositories]
    needed = len(repositories) + sum(2 if has_ingest_port(worker) else 1 for worker in data["workers"])
    ports = iter(free_ports(needed))  # chosen together, so no two of them can be the same
    moved = [{**repository, "port": next(ports)} for repository in repositories]
    data = {**data, "repository": moved if several else moved[0]}
    workers = []
    for worker in data["workers"]:
        worker = {**worker, "port": next(ports)}
        if "ingest_port" in worker:  # an old-style file
            worker["ingest_port"] = next(ports)
        elif has_ingest_port(worker):
            worker["params"] = {**worker["params"], "ingest_port": next(ports)}
        workers.append(worker)
    data["workers"] = workers
    return data


def load_workflow(path: str | Path) -> Workflow:
    source = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise WorkflowError([f"cannot read file: {exc.strerror}"], source) from None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise WorkflowError([f"bad JSON: {exc}"], source) from None
    workflow = parse_workflow(data, source)
    folder = Path(path).resolve().parent  # the workflow's own files are named from where it is
    if workflow.auth is not None and workflow.auth.file is not None and not workflow.auth.file.is_absolute():
        workflow.auth = SecretSource(file=folder / workflow.auth.file)
    if workflow.tls is not None:
        workflow.tls = workflow.tls.resolved(folder)
    return workflow


def with_absolute_paths(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """Workflow JSON read from ``path``, its own files (secret, certificates) named absolutely: a copy written
    elsewhere (next to a recording, on free ports) still finds them."""
    folder = Path(path).resolve().parent
    out = dict(data)
    for key, fields in (("auth", ("secret_file",)), ("tls", ("ca", "cert", "key"))):
        section = data.get(key)
        if isinstance(section, dict):
            out[key] = {k: str(folder / v) if k in fields and isinstance(v, str) else v for k, v in section.items()}
    return out


def parse_workflow(data: object, source: str = "workflow") -> Workflow:
    problems: list[str] = []
    parser = _Parser(problems)
    workflow = parser.workflow(data)
    if parser.moved:
        message = f"{source}: old-style workflow: " + "; ".join(parser.moved)
        log.warning("%s", message)
        warnings.warn(message, DeprecationWarning, stacklevel=2)
    # Cross-worker rules run on whatever could be read, so one run reports every
    # class of problem (a duplicate port next to an unknown key, say).
    _check_topology(parser.repository_ports, parser.drafts, problems)
    if problems or workflow is None:
        raise WorkflowError(problems or ["empty workflow"], source)
    workflow.source = source
    return workflow


@dataclass
class _Draft:
    """A worker as far as it could be read; topology checks use only the parts that were valid."""

    where: str
    spec: WorkerSpec
    #: name, host and port read without problems (a missing value is None, not a guess)
    name: str | None
    host: str | None
    port: int | None
    #: inputs, outputs and params all valid: the worker's streams are known
    streams_known: bool


# --- field checks ---------------------------------------------------------------


def _type_name(value: object) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer"}.get(
        type(value), type(value).__name__
    )


class _Parser:
    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        self.drafts: list[_Draft] = []
        self.repository_ports: list[tuple[str, int]] = []
        #: Where the keys of an old-style file went, one note per worker ("worker 'f1': 'ingest_port' moved ...").
        self.moved: list[str] = []

    def bad(self, where: str, message: str) -> None:
        self.problems.append(f"{where}: {message}")

    def unknown_keys(self, where: str, obj: dict[str, Any], allowed: set[str]) -> None:
        for key in sorted(set(obj) - allowed):
            self.bad(where, f"unknown key '{key}' (allowed: {', '.join(sorted(allowed))})")

    def string(self, where: str, obj: dict[str, Any], key: str, *, required: bool, default: str = "") -> str:
        if key not in obj:
            if required:
                self.bad(where, f"missing required key '{key}'")
            return default
        value = obj[key]
        if not isinstance(value, str) or not value.strip():
            self.bad(where, f"key '{key}' must be a non-empty string, got {_type_name(value)} {value!r}")
            return default
        return value

    def integer(
        self, where: str, obj: dict[str, Any], key: str, *, lo: int, hi: int, required: bool = False
    ) -> int | None:
        if key not in obj:
            if required:
                self.bad(where, f"missing required key '{key}'")
            return None
        value = obj[key]
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            self.bad(where, f"key '{key}' must be an integer in {lo}..{hi}, got {_type_name(value)} {value!r}")
            return None
        return value

    def string_list(self, where: str, obj: dict[str, Any], key: str) -> list[str]:
        value = obj.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            self.bad(where, f"key '{key}' must be an array of non-empty strings, got {value!r}")
            return []
        if len(set(value)) != len(value):
            self.bad(where, f"key '{key}' lists a stream twice")
        return list(value)

    def workflow(self, data: object) -> Workflow | None:
        if not isinstance(data, dict):
            self.bad("workflow", f"must be a JSON object, got {_type_name(data)}")
            return None
        self.unknown_keys("workflow", data, TOP_KEYS)
        name = self.string("workflow", data, "name", required=True, default="unnamed")
        repository, replicas = self.repositories(data.get("repository", {}))
        workers_raw = data.get("workers")
        if not isinstance(workers_raw, list) or not workers_raw:
            self.bad("workflow", "key 'workers' must be a non-empty array of worker objects")
            return None
        workers = [w for n, raw in enumerate(workers_raw) if (w := self.worker(n, raw)) is not None]
        workflow = Workflow(name, repository, workers, auth=self.auth(data["auth"]) if "auth" in data else None,
                            replicas=replicas)
        if "allowed_hosts" in data:
            workflow.allowed_hosts = self.allowed_hosts(data["allowed_hosts"], workflow)
        if "tls" in data:
            workflow.tls = self.tls(data["tls"])
        if "delivery" in data:
            if data["delivery"] in DELIVERIES:
                workflow.delivery = data["delivery"]
            else:
                self.bad("delivery", f"must be one of {', '.join(map(repr, DELIVERIES))}, got {data['delivery']!r:.80}")
        if "pulls" in data:
            if data["pulls"] in PULLS:
                workflow.pulls = data["pulls"]
            else:
                self.bad("pulls", f"must be one of {', '.join(map(repr, PULLS))}, got {data['pulls']!r:.80}")
        if "checkpoint_s" in data:
            every = data["checkpoint_s"]
            if isinstance(every, int | float) and not isinstance(every, bool) and 0 < every <= MAX_CHECKPOINT_S:
                workflow.checkpoint_s = float(every)
            else:
                self.bad("checkpoint_s", f"must be a number of seconds of event time in (0, {MAX_CHECKPOINT_S:g}], "
                                         f"got {every!r:.80}")
        return workflow

    def tls(self, raw: object) -> TlsFiles | None:
        """``{"ca": PATH, "cert": PATTERN, "key": PATTERN}``, ``{host}`` in the patterns for each server's host."""
        if not isinstance(raw, dict):
            self.bad("tls", f"must be an object, got {_type_name(raw)}")
            return None
        self.unknown_keys("tls", raw, TLS_KEYS)
        ca, cert, key = (self.string("tls", raw, k, required=True) for k in ("ca", "cert", "key"))
        if not (ca and cert and key):
            return None
        return TlsFiles(Path(ca), cert, key)
    def allowed_hosts(self, raw: object, workflow: Workflow) -> frozenset[str] | None:
        """``"workflow"`` (the hosts its workers and repositories are on) or a list of hosts."""
        if raw == "workflow":
            return frozenset([*(r.host for r in workflow.repositories), *(w.host for w in workflow.workers)])
        if not isinstance(raw, list) or not raw or not all(isinstance(h, str) and is_host(h) for h in raw):
            self.bad("allowed_hosts", f'must be "workflow" or a non-empty array of hosts, got {raw!r:.80}')
            return None
        missing = sorted({w.host for w in workflow.workers} - set(raw))
        if missing:
            self.bad("allowed_hosts", f"leaves out the workflow's own worker host(s) {', '.join(missing)}")
        return frozenset(raw)

    def auth(self, raw: object) -> SecretSource | None:
        """Where the secret lives: exactly one of a file or an environment variable; never the secret itself."""
        if not isinstance(raw, dict):
            self.bad("auth", f"must be an object, got {_type_name(raw)}")
            return None
        self.unknown_keys("auth", raw, AUTH_KEYS)
        given = sorted(AUTH_KEYS & set(raw))
        if len(given) != 1:
            self.bad("auth", "give exactly one of 'secret_file' (a path) or 'secret_env' (a variable's name)")
            return None
        value = self.string("auth", raw, given[0], required=True)
        if not value:
            return None
        return SecretSource(file=Path(value)) if given[0] == "secret_file" else SecretSource(env=value)

    def repository(self, raw: object) -> RepositorySpec:
        if not isinstance(raw, dict):
            self.bad("repository", f"must be an object, got {_type_name(raw)}")
            return RepositorySpec()
        self.unknown_keys("repository", raw, REPOSITORY_KEYS)
        host = self.string("repository", raw, "host", required=False, default="127.0.0.1")
        port = self.integer("repository", raw, "port", lo=1, hi=65535)
        refresh = self.integer("repository", raw, "refresh_ms", lo=50, hi=600_000)
        spec = RepositorySpec(host, port or 8080, refresh or DEFAULT_REFRESH_MS)
        if "port" not in raw or port is not None:  # a bad port is reported, not checked for clashes
            self.repository_ports.append((spec.host, spec.port))
        return spec

    def repositories(self, raw: object) -> tuple[RepositorySpec, list[RepositorySpec]]:
        """``repository``: one object, or an array of them (replicas: publishers register with all)."""
        if not isinstance(raw, list):
            return self.repository(raw), []
        if not raw:
            self.bad("repository", "an array of repositories must name at least one")
            return RepositorySpec(), []
        specs = [self.repository(item) for item in raw]
        if len({spec.refresh_ms for spec in specs}) > 1:
            self.bad("repository", "every repository of a workflow must have the same refresh_ms")
        return specs[0], specs[1:]

    def worker(self, position: int, raw: object) -> WorkerSpec | None:
        """The worker's spec if it has no problem of its own; a draft of it goes to ``self.drafts``."""
        where = f"worker #{position}"
        if not isinstance(raw, dict):
            self.bad(where, f"must be an object, got {_type_name(raw)}")
            return None
        if isinstance(raw.get("name"), str) and raw["name"]:
            where = f"worker '{raw['name']}'"
        before = len(self.problems)
        raw = self.move_to_params(where, raw)
        self.unknown_keys(where, raw, WORKER_KEYS)
        mark = len(self.problems)
        name = self.string(where, raw, "name", required=True)
        name_ok = len(self.problems) == mark
        type_name = self.string(where, raw, "type", required=True)
        mark = len(self.problems)
        host = self.string(where, raw, "host", required=True)
        host_ok = len(self.problems) == mark
        port = self.integer(where, raw, "port", lo=1, hi=65535, required=True)
        peer = self.string(where, raw, "peer", required=False, default=name)
        mark = len(self.problems)
        inputs = self.string_list(where, raw, "inputs")
        buffer_size = self.integer(where, raw, "buffer_size", lo=1, hi=MAX_BUFFER_SIZE)
        buffer_bytes = self.integer(where, raw, "buffer_bytes", lo=MIN_BUFFER_BYTES, hi=MAX_BUFFER_BYTES)
        params = raw.get("params", {})
        if not isinstance(params, dict):
            self.bad(where, f"key 'params' must be an object, got {_type_name(params)}")
            params = {}
        streams_ok = len(self.problems) == mark
        component = get_component_type(type_name) if type_name else None
        if type_name and component is None:
            from pan.components.catalog import component_types

            known = ", ".join(sorted(component_types()))
            self.bad(where, f"key 'type': unknown worker type '{type_name}' (known: {known})")
        spec = WorkerSpec(
            name=name,
            type=type_name,
            host=host,
            port=port or 0,
            peer=peer,
            inputs=inputs,
            buffer_size=buffer_size or DEFAULT_BUFFER_SIZE,
            buffer_bytes=buffer_bytes or DEFAULT_BUFFER_BYTES,
            params=params,
            ordering=raw.get("ordering"),
        )
        if spec.ordering is not None and component is not None:
            check_ordering = getattr(component, "check_ordering", None)
            if check_ordering is None:
                self.bad(where, f"key 'ordering': type '{type_name}' has no ordering unit")
            else:
                for problem in check_ordering(spec):
                    self.bad(where, problem)
        if component is not None and streams_ok:
            # params are checked even when other keys are wrong: they are a class of problem too
            mark = len(self.problems)
            for problem in component.check_params(spec):
                self.bad(where, f"params.{problem}")
            streams_ok = len(self.problems) == mark
        self.drafts.append(
            _Draft(
                where=where,
                spec=spec,
                name=name if name_ok else None,
                host=host if host_ok else None,
                port=port,
                streams_known=component is not None and streams_ok,
            )
        )
        return None if len(self.problems) > before else spec

    def move_to_params(self, where: str, raw: dict[str, Any]) -> dict[str, Any]:
        """An old-style worker with its forwarder keys moved into ``params``; each move noted in ``self.moved``.

        Old-style forwarders read non-JSON lines with whichever installed decoder
        claims their streams; the note says to name it in ``params.decoder``.
        """
        keys = [key for key in MOVED_TO_PARAMS if key in raw]
        params = raw.get("params", {})
        if not keys or not isinstance(params, dict):
            return raw  # nothing old-style, or params that are reported as broken anyway
        raw, params = dict(raw), dict(params)
        notes = []
        for key in keys:
            if key in params:
                self.bad(where, f"key '{key}' is given twice, at the top and in params (it belongs in params)")
                raw.pop(key)
                continue
            params[key] = raw.pop(key)
            notes.append(f"'{key}' moved to params.{key}")
        streams = params.get("inter_pan_inputs")
        decoder = claiming_decoder(streams) if isinstance(streams, list) and "decoder" not in params else None
        if decoder is not None:
            params["decoder"] = decoder
            notes.append(f"its non-JSON rows are read by the '{decoder}' decoder: set params.decoder")
        if notes:
            self.moved.append(f"{where}: " + ", ".join(notes))
        raw["params"] = params
        return raw


def _check_topology(repositories: list[tuple[str, int]], drafts: list[_Draft], problems: list[str]) -> None:
    """Cross-worker rules: unique names and ports, one producer per stream, every input produced.

    Runs on drafts, so a worker with a problem of its own still takes part with the
    keys that were valid; a rule that needs a key a worker got wrong skips that worker.
    """
    names: set[str] = set()
    ports: dict[tuple[str, int], str] = {}
    for n, repository in enumerate(repositories):
        if repository in ports:
            problems.append(f"repository: two repositories on {repository[0]}:{repository[1]}")
        ports[repository] = "the repository" if len(repositories) == 1 else f"repository #{n}"
    producers: dict[str, str] = {}
    peer_hosts: dict[str, str] = {}
    for draft in drafts:
        spec, where = draft.spec, draft.where
        if draft.name is not None:
            if draft.name in names:
                problems.append(f"{where}: key 'name': duplicate worker name")
            names.add(draft.name)
        if draft.host is not None:
            component = get_component_type(spec.type)
            listening = {} if component is None else component.listen_ports(spec)
            for key, port in (("port", draft.port), *listening.items()):
                if port is None or not 1 <= port <= 65535:
                    continue
                owner = ports.setdefault((draft.host, port), f"{where} ({key})")
                if owner != f"{where} ({key})":
                    problems.append(f"{where}: key '{key}': port {draft.host}:{port} already used by {owner}")
            host = peer_hosts.setdefault(spec.peer, draft.host)
            if host != draft.host:
                problems.append(f"{where}: key 'peer': peer '{spec.peer}' is on host {host}, not {draft.host}")
        if not draft.streams_known:
            continue
        component = get_component_type(spec.type)
        assert component is not None
        for stream in component.output_names(spec):
            if component.repeats:
                continue
            other = producers.setdefault(stream, spec.name)
            if other != spec.name:
                problems.append(f"{where}: stream '{stream}' is already produced by worker '{other}'")
    # A worker with problems of its own may still be the producer of a stream nobody else makes:
    # its outputs are guessed from what could be read, and an unknown type could produce anything.
    maybe: set[str] = set()
    for draft in drafts:
        if draft.streams_known:
            continue
        component = get_component_type(draft.spec.type)
        try:
            guessed = None if component is None else component.output_names(draft.spec)
        except Exception:  # params with problems can break any component's naming
            guessed = None
        if guessed is None:
            return  # every missing producer could be this worker: say nothing false
        maybe.update(guessed)
    for draft in drafts:
        if not draft.streams_known:
            continue
        component = get_component_type(draft.spec.type)
        assert component is not None
        for stream in component.input_names(draft.spec):
            if stream not in producers and stream not in maybe:
                problems.append(f"{draft.where}: key 'inputs': stream '{stream}' is produced by no worker")
