"""Pieces of `pan bench chaos`: fault schedule, chaos workflow, processes, recorder, comparison.

* :func:`make_schedule` draws a seeded list of faults (pure, deterministic);
* :func:`chaos_workflow` adds two peers of level-1 repeaters to a workflow, so
  that recorders pull some streams through repeaters that can be killed;
* :class:`Cluster` runs the repository and one `pan peer` process per peer,
  each in its own process group, so that any of them can be paused, killed and
  restarted, and probes their ``/health``;
* recording runs in processes of their own (``python -m benchmarks.chaos_parts
  record``), off the loop that probes health: the recorder takes every stream
  but the tight ones and is never faulted (it is the measuring instrument);
  the consumer takes only the tight streams, light enough to keep up with
  their small buffers, and is what a stall pauses;
* :func:`compare` sets a recording against the undisturbed one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from benchmarks import common
from pan.util import eventloop

FAULT_KINDS = ("pause", "restart", "drop", "stall")
CONSUMER = "consumer"  # the recording process a stall pauses: it takes only the tight streams
#: A paused producer stalls the lockstep feed and its consumers' inputs. Ordering units treat an input
#: silent for their ``idle_timeout`` (5 s in the shipped workflows) as idle and move on without it, which
#: changes outputs by design, so producers are paused for well under that.
PRODUCER_PAUSE_S = (0.5, 2.5)
#: Pauses of the repository and of repeaters: nothing downstream depends on their timing.
OTHER_PAUSE_S = (0.5, 4.0)
#: Down time of a killed process before its replacement starts.
RESTART_DOWN_S = (0.2, 2.0)
#: A stall pauses the consumer long enough for the tight buffers to overwrite tuples it has not fetched
#: yet: those losses must all come back as reported gaps.
STALL_S = (6.0, 10.0)
FIRST_FAULT_S = 2.0  # after the feed started: the workflow is busy by then
REPEATER_PEERS = ("rep1", "rep2")
#: Leaf streams (no worker consumes them) the repeater peers repeat: a pause or a restart of a repeater
#: then disturbs only the recorders that pull through it, never a worker's input.
DEFAULT_REPEATED = (
    *(f"RUN_{team}{n}" for team in "AB" for n in range(1, 9)),
    "BP_wholeGame_A", "BP_wholeGame_B", "BP_1min_A", "BP_1min_B", "REFEREE",
)
#: Buffers of the repeated streams' producers and of the repeaters: large enough to hold a whole short
#: match, so a restarted repeater re-pulls every tuple and every outage is covered.
COVERING_BUFFER = 200_000
#: Workers whose producer buffers are tight on purpose (all their outputs are leaves): a stalled recorder
#: loses tuples of their streams, which is what the suite checks gets reported.
TIGHT_WORKERS = ("Running team B",)
TIGHT_BUFFER = 250  # tuples: ~4.5 s of one of their streams in real time
HEALTH_BOUND_S = 2.0  # acceptance: every process answers /health this soon after a fault ends
HEALTH_TRY_S = 1.0  # one /health request
HEALTH_GIVE_UP_S = 15.0  # a process not answering by then counts as not answering at all
START_TIMEOUT_S = 60.0  # a (re)started process answers /health within this, or the run fails
GRACE_S = 10.0  # SIGTERM, then SIGKILL
QUIET_S = 6.0  # outputs unchanged this long after the data ended = done (> the ordering idle timeout)
MAX_DRAIN_S = 180.0
RECORD_LINGER_S = 0.05  # between fetches of one stream (as `pan replay`'s recorder)
RECORD_PAGE = 5000
RECORD_WAIT_MS = 500


# --- the fault schedule -------------------------------------------------------------------


@dataclass(frozen=True)
class Fault:
    """One planned fault.

    ``duration_s``: for a pause, SIGSTOP to SIGCONT; for a restart, the down
    time between SIGKILL and the replacement's start; 0 for a drop (every
    established TCP connection of the process's HTTP ports is aborted at once).
    """

    kind: str
    target: str
    at_s: float  # planned start, seconds after the feed started
    duration_s: float

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": self.target, "at_s": round(self.at_s, 3),
                "duration_s": round(self.duration_s, 3)}


def make_schedule(
    seed: int, targets: dict[str, list[str]], window_s: float, count: int, producers: frozenset[str] = frozenset()
) -> list[Fault]:
    """``count`` faults spread over ``window_s`` seconds, the same for the same arguments.

    ``targets``: kind -> process names it may hit (a kind without targets is
    left out). Kinds take turns before the shuffle, so every kind appears once
    ``count`` reaches the number of kinds. ``producers`` get the short pauses;
    a stall pauses the consumer for ``STALL_S``.
    """
    kinds = [kind for kind in FAULT_KINDS if targets.get(kind)]
    if count <= 0 or not kinds:
        return []
    rng = random.Random(f"pan-chaos:{seed}")
    order = [kinds[n % len(kinds)] for n in range(count)]
    rng.shuffle(order)
    slot = max(window_s - FIRST_FAULT_S, 0.0) / count
    faults = []
    for n, kind in enumerate(order):
        target = rng.choice(sorted(targets[kind]))
        at_s = FIRST_FAULT_S + n * slot + rng.uniform(0.0, slot / 2)
        if kind == "pause":
            low, high = PRODUCER_PAUSE_S if target in producers else OTHER_PAUSE_S
            duration = rng.uniform(low, high)
        elif kind == "restart":
            duration = rng.uniform(*RESTART_DOWN_S)
        elif kind == "stall":
            duration = rng.uniform(*STALL_S)
        else:
            duration = 0.0
        faults.append(Fault(kind, target, round(at_s, 3), round(duration, 3)))
    return faults


def drop_supported() -> bool:
    """Dropping connections uses `ss -K` (socket destroy), which needs root and the ss tool."""
    return os.geteuid() == 0 and shutil.which("ss") is not None


# --- the workflow -------------------------------------------------------------------------


def chaos_workflow(
    source: Path, out: Path, repeated: tuple[str, ...] = DEFAULT_REPEATED, tight: tuple[str, ...] = TIGHT_WORKERS
) -> Path:
    """``source`` on free ports plus one level-1 repeater of ``repeated`` on each of two new peers.

    Producers of ``repeated`` streams get buffers that hold the whole match,
    except the ``tight`` workers, whose buffers hold ``TIGHT_BUFFER`` tuples
    (their repeaters still hold everything they pulled).
    """
    from pan.components.catalog import get_component_type
    from pan.workflow.parser import on_free_ports, parse_workflow

    data = json.loads(Path(source).read_text())
    workflow = parse_workflow(data, str(source))
    producers: dict[str, str] = {}
    consumed: set[str] = set()
    outputs: dict[str, list[str]] = {}
    for spec in workflow.workers:
        component = get_component_type(spec.type)
        assert component is not None
        consumed.update(component.input_names(spec))
        outputs[spec.name] = component.output_names(spec)
        if not component.repeats:
            producers.update(dict.fromkeys(component.output_names(spec), spec.name))
    unknown = [s for s in repeated if s not in producers]
    if unknown:
        raise ValueError(f"{source}: no producer for {', '.join(unknown)}")
    inner = [s for s in repeated if s in consumed]
    if inner:
        raise ValueError(f"repeated streams must be leaves, but workers consume {', '.join(inner)}")
    inner = [f"{w}: {s}" for w in tight for s in outputs.get(w, []) if s in consumed]
    if inner or not set(tight) <= set(outputs):
        raise ValueError(f"tight workers must exist and feed no worker: {', '.join(inner) or ', '.join(tight)}")
    covering = {producers[s] for s in repeated} - set(tight)
    for worker in data["workers"]:
        if worker["name"] in covering:
            worker["buffer_size"] = max(worker.get("buffer_size", 0), COVERING_BUFFER)
        elif worker["name"] in tight:
            worker["buffer_size"] = TIGHT_BUFFER
    host = data["repository"]["host"]
    for n, peer in enumerate(REPEATER_PEERS, 1):
        data["workers"].append({"name": f"Repeater {n}", "type": "repeater", "host": host, "port": 0, "peer": peer,
                                "inputs": list(repeated), "params": {"level": 1}, "buffer_size": COVERING_BUFFER})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(on_free_ports(data), indent=1))
    return out


# --- the processes ------------------------------------------------------------------------


class Proc(common.Child):
    """One PAN process of the cluster, restartable with the same command line; logs to ``log_dir``."""

    def __init__(self, name: str, args: list[str], endpoints: list[tuple[str, int]], log_dir: Path) -> None:
        super().__init__(args, ready=False, grace_s=GRACE_S)
        self.name = name
        self.endpoints = endpoints  # HTTP (host, port) of every server it runs
        self.log_dir = log_dir
        self.starts = 0

    async def start(self) -> Proc:
        """Start (again): every start logs to a file of its own, ``NAME-N.log``."""
        self.starts += 1
        self.log = self.log_dir / f"{self.name}-{self.starts}.log"
        await super().start()
        return self


class Cluster:
    """The repository and every peer of a workflow, each its own process, started and stopped here."""

    def __init__(self, workflow_path: Path, log_dir: Path) -> None:
        from pan.workflow.parser import load_workflow

        self.workflow_path = workflow_path
        self.workflow = load_workflow(workflow_path)
        log_dir.mkdir(parents=True, exist_ok=True)
        repo = self.workflow.repository
        pan = [sys.executable, "-m", "pan"]
        self.procs: dict[str, Proc] = {"repository": Proc(
            "repository", [*pan, "repository", "--host", repo.host, "--port", str(repo.port)],
            [(repo.host, repo.port)], log_dir)}
        for peer, specs in self.workflow.peers().items():
            self.procs[peer] = Proc(peer, [*pan, "peer", str(workflow_path), "--name", peer],
                                    [(s.host, s.port) for s in specs], log_dir)
        self._session: Any = None
        self.crashed: list[str] = []  # processes that ended on their own, not by a fault or by stop()
        self.outside: dict[str, int] = {}  # pids of processes outside the workflow that a stall may pause

    @property
    def peers(self) -> list[str]:
        return [name for name in self.procs if name != "repository"]

    async def start(self) -> None:
        import aiohttp

        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        await self.procs["repository"].start()
        await self.wait_up("repository")
        for peer in self.peers:
            await self.procs[peer].start()
        for peer in self.peers:
            await self.wait_up(peer)

    async def wait_up(self, name: str) -> float:
        """Seconds until every server of ``name`` answers /health; RuntimeError after ``START_TIMEOUT_S``."""
        latency = await self.health_latency(name, time.monotonic(), START_TIMEOUT_S)
        if latency is None:
            raise RuntimeError(f"{name} did not answer /health within {START_TIMEOUT_S:.0f} s "
                               f"(log: {self.procs[name].log_dir / name}-{self.procs[name].starts}.log)")
        return latency

    async def health_latency(self, name: str, since: float, give_up_s: float = HEALTH_GIVE_UP_S) -> float | None:
        """Seconds from ``since`` until every server of ``name`` has answered /health (None: not by give-up)."""
        answers = await asyncio.gather(*(self._first_health(h, p, since, give_up_s)
                                         for h, p in self.procs[name].endpoints))
        return None if any(a is None for a in answers) else max(answers)  # type: ignore[type-var]

    async def health_all(self, since: float) -> dict[str, float | None]:
        names = list(self.procs)
        latencies = await asyncio.gather(*(self.health_latency(n, since) for n in names))
        return {n: None if s is None else round(s, 3) for n, s in zip(names, latencies, strict=True)}

    async def _first_health(self, host: str, port: int, since: float, give_up_s: float) -> float | None:
        import aiohttp

        while time.monotonic() - since < give_up_s:
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                async with self._session.get(f"http://{host}:{port}/health",
                                             timeout=aiohttp.ClientTimeout(total=HEALTH_TRY_S)) as response:
                    await response.read()
                    if response.status == 200:
                        return time.monotonic() - since
            await asyncio.sleep(0.02)
        return None

    async def wait_registered(
        self, streams: list[str], repeated: list[str], timeout_s: float = START_TIMEOUT_S
    ) -> None:
        """Every stream has its producer in the repository, and each repeated one every repeater."""
        from pan.repository.client import RepositoryClient

        repo = self.workflow.repository
        repository = RepositoryClient((repo.host, repo.port), session=self._session, timeout_s=5)
        deadline = time.monotonic() + timeout_s
        await repository.wait_for_publishers(streams, timeout_s, producers=1)
        await repository.wait_for_publishers(repeated, deadline - time.monotonic(), repeaters=len(REPEATER_PEERS))

    async def stop(self) -> dict[str, int | None]:
        """Peers first (they unpublish), then the repository; exit codes by process."""
        self.crashed = [n for n, p in self.procs.items() if p.process is not None and p.process.returncode is not None]
        codes = dict(zip(self.peers, await asyncio.gather(*(self.procs[p].stop() for p in self.peers)), strict=True))
        codes["repository"] = await self.procs["repository"].stop()
        if self._session is not None:
            await self._session.close()
        return codes


# --- applying faults ----------------------------------------------------------------------


async def apply_fault(fault: Fault, cluster: Cluster, t0: float) -> dict[str, Any]:
    """Do ``fault`` now; what happened, times in seconds after ``t0`` (the feed's start).

    A fault ends at SIGCONT (pause), when the replacement answers /health
    (restart: ``restart_s`` is SIGKILL to that moment) or when the connections
    are cut (drop). Then every process's /health latency is measured.
    """
    record: dict[str, Any] = {**fault.as_dict(), "started_s": round(time.monotonic() - t0, 3)}
    if fault.kind == "stall":
        pid = cluster.outside[fault.target]
        os.kill(pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(fault.duration_s)
        finally:
            os.kill(pid, signal.SIGCONT)
        ended = time.monotonic()
        record["ended_s"] = round(ended - t0, 3)
        record["health_s"] = await cluster.health_all(ended)
        return record
    proc = cluster.procs[fault.target]
    if fault.kind == "pause":
        proc.signal(signal.SIGSTOP)
        try:
            await asyncio.sleep(fault.duration_s)
        finally:
            proc.signal(signal.SIGCONT)
    elif fault.kind == "restart":
        killed = time.monotonic()
        await proc.kill()
        await asyncio.sleep(fault.duration_s)
        await proc.start()
        try:
            await cluster.wait_up(fault.target)
            record["restart_s"] = round(time.monotonic() - killed, 3)
        except RuntimeError as exc:  # never back: its /health below says so, and the run goes on
            record["restart_s"], record["error"] = None, str(exc)
    elif fault.kind == "drop":
        record["connections_dropped"] = await drop_connections([port for _, port in proc.endpoints])
    else:
        raise ValueError(f"unknown fault kind {fault.kind!r}")
    ended = time.monotonic()
    record["ended_s"] = round(ended - t0, 3)
    record["health_s"] = await cluster.health_all(ended)
    return record


async def drop_connections(ports: list[int]) -> int:
    """Abort every established TCP connection from or to ``ports`` (both ends on loopback); how many sockets."""
    expression = " or ".join(f"sport = :{p} or dport = :{p}" for p in ports)
    process = await asyncio.create_subprocess_exec(
        "ss", "-K", "-t", "-n", "-H", "state", "established", f"( {expression} )",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, _ = await process.communicate()
    return sum(1 for line in out.decode().splitlines() if line.strip())


async def run_schedule(faults: list[Fault], cluster: Cluster, t0: float) -> list[dict[str, Any]]:
    """Apply ``faults`` one after the other, each at its planned time or when the previous one is over."""
    done = []
    for fault in faults:
        await asyncio.sleep(max(0.0, t0 + fault.at_s - time.monotonic()))
        record = await apply_fault(fault, cluster, t0)
        done.append(record)
        print(f"chaos: {record['kind']} {record['target']} at {record['started_s']:.1f} s "
              f"({record['duration_s']:.2f} s): /health after {max_health(record)} s", file=sys.stderr, flush=True)
    return done


def max_health(record: dict[str, Any]) -> float | None:
    values = list(record["health_s"].values())
    return None if any(v is None for v in values) else max(values)


# --- the recorder (a process of its own) ----------------------------------------------------


@dataclass
class StreamRecord:
    """What the recorder saw of one stream, beyond its tuples."""

    received: int = 0
    reported_missed: int = 0  # the subscriber's own count of skipped indices
    reported_ranges: list[list[int]] = field(default_factory=list)  # [first, last] index of each reported gap
    unexplained_jumps: int = 0  # index jumps between delivered tuples that the client did not report as a gap
    resets: int = 0
    via_repeater: int = 0  # tuples that came from a repeater
    failovers: int = 0
    errors: int = 0


async def record_stream(stream: str, subscriber: Any, out: IO[bytes], state: StreamRecord) -> None:
    """Fetch ``stream`` forever, appending tuples to ``out`` and noting every gap and reset reported."""
    import orjson

    last = -1
    while True:
        fetch = await subscriber.fetch()
        if fetch.reset:
            state.resets += 1
            last = -1
        jumps = []
        for item in fetch.tuples:
            index = item["i"]
            if index > last + 1:
                jumps.append([last + 1, index - 1])
            last = max(last, index)
        reported = [list(gap) for gap in fetch.gaps]  # the client's own gaps: (first, last) missed index
        state.reported_missed += fetch.missed
        state.reported_ranges.extend(reported)
        state.unexplained_jumps += sum(1 for jump in jumps if jump not in reported)
        if fetch.tuples:
            out.write(b"".join(orjson.dumps(item) + b"\n" for item in fetch.tuples))
            state.received += len(fetch.tuples)
            if subscriber.source is not None and subscriber.source.rep:
                state.via_repeater += len(fetch.tuples)
        await asyncio.sleep(RECORD_LINGER_S)


def tight_streams(workflow: Any) -> list[str]:
    """Output streams of the ``TIGHT_WORKERS`` in ``workflow`` (the consumer's share of the recording)."""
    from pan.components.catalog import get_component_type

    streams = []
    for spec in workflow.workers:
        if spec.name in TIGHT_WORKERS:
            component = get_component_type(spec.type)
            assert component is not None
            streams.extend(component.output_names(spec))
    return streams


async def record(workflow_path: Path, out_dir: Path, name: str, tight: bool) -> None:
    """Record output streams until told to drain (a line on stdin), then write ``<name>.json``.

    ``tight``: only the tight streams; otherwise every other output stream.
    """
    import aiohttp

    from pan.input.subscriber import StreamSubscriber
    from pan.workflow.parser import load_workflow
    from simulator.replay import output_streams

    workflow = load_workflow(workflow_path)
    chosen = set(tight_streams(workflow))
    streams = [s for s in output_streams(workflow) if (s in chosen) == tight]
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    states: dict[str, StreamRecord] = {}
    subscribers: dict[str, StreamSubscriber] = {}
    files: dict[str, IO[bytes]] = {}
    tasks = []
    for stream in streams:
        states[stream] = StreamRecord()
        files[stream] = (out_dir / f"{stream}.jsonl").open("wb")
        subscribers[stream] = StreamSubscriber(stream, workflow.repository.address, max_wait_ms=RECORD_WAIT_MS,
                                               page_size=RECORD_PAGE, session=session)
        tasks.append(asyncio.create_task(record_stream(stream, subscribers[stream], files[stream], states[stream]),
                                         name=f"record {stream}"))
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.readline)  # the driver's "drain": the data has ended
    quiet = await wait_quiet(states)
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    for stream, out in files.items():
        out.close()
        stats = subscribers[stream].stats
        states[stream].failovers, states[stream].errors = stats.failovers, stats.errors
    await session.close()
    summary = {"quiet": quiet, "streams": {name: asdict(state) for name, state in states.items()}}
    (out_dir / f"{name}.json").write_text(json.dumps(summary))
    print("done", flush=True)


async def wait_quiet(states: dict[str, StreamRecord]) -> bool:
    """True once no tuple arrived for ``QUIET_S``; False if still busy after ``MAX_DRAIN_S``."""
    deadline = time.monotonic() + MAX_DRAIN_S
    last_total, last_change = -1, time.monotonic()
    while time.monotonic() < deadline:
        total = sum(s.received for s in states.values())
        if total != last_total:
            last_total, last_change = total, time.monotonic()
        elif time.monotonic() - last_change >= QUIET_S:
            return True
        await asyncio.sleep(0.2)
    return False


# --- the comparison -----------------------------------------------------------------------


def compare(reference: Path, run: Path, recorded: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Per stream: tuples lost, duplicated, changed and extra against ``reference``, and what was reported.

    ``unreported`` counts lost indices outside every gap the subscriber
    reported: each one is a silent loss.
    """
    import orjson

    result = {}
    for stream, state in recorded["streams"].items():
        ref_bytes = (reference / f"{stream}.jsonl").read_bytes()
        run_bytes = (run / f"{stream}.jsonl").read_bytes()
        row = {"reference": ref_bytes.count(b"\n"), "recorded": run_bytes.count(b"\n"), "identical": 1,
               "lost": 0, "duplicated": 0, "changed": 0, "extra": 0, "reported": state["reported_missed"],
               "unreported": 0, "unexplained_jumps": state.get("unexplained_jumps", 0), "resets": state["resets"],
               "via_repeater": state["via_repeater"]}
        if ref_bytes != run_bytes:
            ref = {orjson.loads(line)["i"]: line for line in ref_bytes.splitlines()}
            seen: dict[int, bytes] = {}
            for line in run_bytes.splitlines():
                index = orjson.loads(line)["i"]
                if index in seen:
                    row["duplicated"] += 1
                seen.setdefault(index, line)
            lost = [i for i in ref if i not in seen]
            ranges = state["reported_ranges"]
            row.update(identical=0, lost=len(lost), extra=sum(1 for i in seen if i not in ref),
                       changed=sum(1 for i, line in seen.items() if i in ref and ref[i] != line),
                       unreported=sum(1 for i in lost if not any(a <= i <= b for a, b in ranges)))
        result[stream] = row
    return result


def totals(streams: dict[str, dict[str, int]]) -> dict[str, int]:
    keys = ("reference", "recorded", "identical", "lost", "duplicated", "changed", "extra", "reported",
            "unreported", "unexplained_jumps", "resets", "via_repeater")
    out = {k: sum(row[k] for row in streams.values()) for k in keys}
    out["streams"] = len(streams)
    out["streams_via_repeater"] = sum(1 for row in streams.values() if row["via_repeater"])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.chaos_parts")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("record", help="record output streams of a workflow until a line arrives on stdin")
    p.add_argument("workflow", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--name", required=True, help="the summary goes to OUT/NAME.json")
    p.add_argument("--tight", action="store_true", help="only the tight streams (else all the others)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    eventloop.run(record(args.workflow, args.out, args.name, args.tight))
    return 0


if __name__ == "__main__":
    sys.exit(main())
