"""`pan replay`: run a workflow on recorded sensor data and record every output.

One harness for tests, benchmarks and users:

1. start the workflow with `pan run` (real processes) and wait until every
   output stream has its original producer registered;
2. subscribe to every output stream and append its tuples to
   ``OUTDIR/<stream>.jsonl``;
3. feed the data with the sensor simulator;
4. stop by itself once every output has ended (the feed's end promises flow
   through the ordering units as ``wm`` = 2^62) and has been recorded, or,
   for outputs that never end, once nothing has moved for a while.

The feed is passed in as a callable (``simulator.replay_cli`` passes the
sensor simulator, benchmarks pass their own), so the harness itself knows no
input format.

The recorder reads over the wire format of this process (``PAN_WIRE``,
`pan/wire/arrow_pages.py`) or the one it is given, which `pan run` then gets too,
so a whole replay uses one format; what it writes is the same either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from pan.components.catalog import get_component_type
from pan.config.specs import Workflow
from pan.config.trust import Trust
from pan.input.fetcher import Wire, default_wire
from pan.input.page_batches import PageBatcher
from pan.input.subscriber import StreamSubscriber
from pan.launch.launcher import FAILED_FILE, log_tail
from pan.launch.lifeline import Lifeline
from pan.repository.client import RepositoryClient
from pan.wire import line_pages
from pan.wire.arrow_pages import WIRE_ENV
from pan.workflow.health import failed_tasks
from simulator.recording import StreamFile, stream_file

log = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 60.0
QUIET_S = 6.0  # no tuple and no watermark moved this long after the data ended = done (outputs that never end)
#: How long after the feed outputs may keep changing (s). Waiting for streams to end (``until_ended``) is
#: a safety net against a stuck run: a loaded machine can take many minutes to drain a long feed. Without
#: it, streams that never end keep their watermarks moving, so this is what stops the recording.
MAX_DRAIN_S = 1800.0
MAX_QUIET_DRAIN_S = 120.0
#: The peers of a replay are supervised (`pan run --fail-fast` ends the replay when one dies), so a receiver that does
#: not answer is starved, not gone: its sensors wait this long for it before they count rows lost (10 s, the plain
#: `pan simulate` default, lost rows and end promises beside 8 CPU hogs), and one connection attempt may take this long.
SUPERVISED_GIVE_UP_S = 300.0
SUPERVISED_CONNECT_TIMEOUT_S = 10.0


class WorkflowStopped(RuntimeError):
    """`pan run` ended before the replay did: a peer or the repository exited (named, with its log's end)."""


def stopped_reason(log_dir: Path, returncode: int) -> str:
    """Why the workflow stopped, from what `pan run --fail-fast` left in ``log_dir``."""
    try:
        failed = orjson.loads((log_dir / FAILED_FILE).read_bytes())
        head, tail = f"{failed['child']} {failed['why']} (log: {failed['log']})", failed["tail"]
    except (OSError, ValueError, KeyError, TypeError):
        run_log = log_dir / "run.log"
        head, tail = f"pan run exited with code {returncode} (log: {run_log})", log_tail(run_log)
    return head + "".join(f"\n  | {line}" for line in tail)


@dataclass
class ReplayResult:
    streams: dict[str, int]  # stream -> tuples recorded
    feed: Any  # what the feeder returned (the simulator's summary)
    elapsed_s: float
    feed_s: float
    missed: dict[str, int] = field(default_factory=dict)
    wire: Wire = "json"  # the page format the recorder asked for
    recorded_s: float = 0.0  # from the start of the feed until every output was recorded
    #: worker -> task -> error, for workers whose /health said a task of theirs ended with an error: a dead
    #: input pull or component looks like a quiet stream in the recording, so the replay must say it
    failed_tasks: dict[str, dict[str, str]] = field(default_factory=dict)
    #: this process's CPU seconds (the simulator and the recorder): until the feed started, and until every
    #: output was recorded (`pan replay --json` reports them: the start-up apart from the work)
    cpu_s: dict[str, float] = field(default_factory=dict)
    #: the recorder's ``POST /pages`` requests and the pages they carried
    recorder_requests: dict[str, int] = field(default_factory=dict)
    #: stream -> bytes of JSON lines recorded (before compression, if the recording is compressed)
    json_bytes: dict[str, int] = field(default_factory=dict)


def output_streams(workflow: Workflow) -> list[str]:
    """Every stream an original producer of the workflow publishes (repeaters add none)."""
    streams: list[str] = []
    for spec in workflow.workers:
        component = get_component_type(spec.type)
        assert component is not None
        if not component.repeats:
            streams.extend(component.output_names(spec))
    return streams


@dataclass(frozen=True)
class RecordPace:
    """How eagerly the recorder asks again.

    ``linger_s``: the pause after a page that caught up with its publisher: tuples gathered meanwhile come in
    one page, so hundreds of streams make fewer, larger requests (the recorder's HTTP requests are most of the
    replay driver's CPU; the batcher sends one per publisher). A stream with more waiting is fetched again at
    once, so a busy stream is never throttled. Publishers hold what is not recorded yet (``hold``).
    ``max_wait_ms``: its long polls, which wait on data only: an end that comes without data is seen when one
    runs out.
    """

    linger_s: float
    max_wait_ms: int


#: A paced replay records for as long as the match lasts: a few requests a second per publisher.
PACED = RecordPace(linger_s=0.25, max_wait_ms=500)
#: An unpaced replay is over when the recorder has seen every end, and is timed up to there: with ``PACED`` it
#: saw its ends 0.5-1 s after the workers had published them, a fifth of its time, and cost no less CPU (5
#: interleaved replays each, 2026-11-28: driver CPU 2.6 s against 3.0, end to end 105,278 rows/s against 81,629).
UNPACED = RecordPace(linger_s=0.05, max_wait_ms=100)
#: How often the replay checks whether every output has ended and is recorded.
END_CHECK_S = 0.05
RECORD_REQUEST_TIMEOUT_S = 30.0


class Recorder:
    """One subscriber per stream, each appending JSON lines to its own file (``simulator/recording.py``)."""

    def __init__(self, workflow: Workflow, streams: list[str], out_dir: Path, *, wire: Wire | None = None,
                 pace: RecordPace = PACED, decode: bool = False, compress: bool = False) -> None:
        """``wire``: the page format to ask for (default: this process's, ``PAN_WIRE``); ``decode``: decode
        every tuple and encode it again even over JSON (as before line pages; benchmarks compare the two);
        ``compress``: zstd-compressed files."""
        self.workflow = workflow
        self.streams = streams
        self.out_dir = out_dir
        self.wire: Wire = default_wire() if wire is None else wire
        #: Tuples are recorded as the publishers' bytes (line pages), except over Arrow, which is measured.
        self.encoded = self.wire == "json" and not decode
        self.pace = pace
        self.compress = compress
        self.counts = dict.fromkeys(streams, 0)
        self.subscribers: dict[str, StreamSubscriber] = {}
        self._files: dict[str, StreamFile] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._session: aiohttp.ClientSession | None = None
        self.batcher: PageBatcher | None = None
        self.holder = f"pan-replay-{os.getpid()}-{id(self):x}"
        self.trust = Trust.of(workflow)  # a closed workflow's read token and CA

    async def start(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        # One request per publisher for all its streams, not one per stream (pan/input/page_batches.py). Each
        # subscriber lingers before asking again, so hardly two ask in the same loop round: they wait for the
        # request that is out instead, recording is not latency-bound. Over JSON the recorder reads line pages
        # (pan/wire/line_pages.py) and writes each tuple's bytes as the publisher holds them, decoding none.
        self.batcher = PageBatcher(self._session, request_timeout_s=RECORD_REQUEST_TIMEOUT_S, token=self.trust.token,
                                   tls=self.trust.client_tls(), one_request_out=True, lines=self.encoded)
        for stream in self.streams:
            self._files[stream] = stream_file(self.out_dir, stream, self.compress)
            subscriber = StreamSubscriber(
                stream,
                self.workflow.repository_addresses,
                max_wait_ms=self.pace.max_wait_ms,
                page_size=5000,
                # Recording is not latency-bound, and a replay driver reading hundreds of streams on a busy
                # machine may take seconds to get to a page: a short timeout would only make it fail over.
                request_timeout_s=RECORD_REQUEST_TIMEOUT_S,
                norep=True,
                session=self._session,
                hold=self.holder,  # publishers keep what we have not recorded yet: a replay loses nothing
                wire=self.wire,
                token=self.trust.token,
                tls=self.trust.client_tls(),
                batcher=self.batcher,
                encoded=self.encoded,
            )
            self.subscribers[stream] = subscriber
            self._tasks.append(asyncio.create_task(self._record(stream, subscriber), name=f"record {stream}"))

    async def holding(self, timeout_s: float) -> None:
        """Until every publisher has answered once: from then on it holds what we have not recorded.

        Before that, a fast workflow could overwrite a stream's first tuples while hundreds of first
        requests are still on their way (the heat maps of a 20x replay did, 1,318 of each).
        """
        deadline = time.monotonic() + timeout_s
        while waiting := [s for s, sub in self.subscribers.items() if sub.state.epoch is None]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(waiting)} output streams never answered the recorder within "
                                   f"{timeout_s:.0f} s (e.g. {', '.join(waiting[:5])})")
            await asyncio.sleep(0.05)

    async def _record(self, stream: str, subscriber: StreamSubscriber) -> None:
        out = self._files[stream]
        async for batch in subscriber.batches():
            line_pages.write(out, batch, self.encoded)
            self.counts[stream] += len(batch)
            if subscriber.position >= subscriber.upstream_last:  # caught up: let the next page fill
                await asyncio.sleep(self.pace.linger_s)

    def requests(self) -> dict[str, int]:
        """The ``POST /pages`` requests sent so far, and the pages they carried."""
        if self.batcher is None:
            return {}
        return {"requests": self.batcher.requests, "pages": self.batcher.pages}

    def total(self) -> int:
        return sum(self.counts.values())

    def json_bytes(self) -> dict[str, int]:
        """Bytes of JSON lines written per stream so far (before compression)."""
        return {stream: file.json_bytes for stream, file in self._files.items()}

    def progress(self) -> tuple[int, tuple[Any, ...]]:
        """Tuples recorded and every stream's watermark: anything moving means the run goes on."""
        return self.total(), tuple(sub.progress.wm for sub in self.subscribers.values())

    def not_ended(self) -> list[str]:
        """The streams that have not ended, or not been recorded up to their producer's last tuple."""
        return [
            stream for stream, sub in self.subscribers.items()
            if not sub.progress.ended or sub.position < sub.upstream_last
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for out in self._files.values():
            out.close()
        if self.batcher is not None:
            await self.batcher.close()
        if self._session is not None:
            await self._session.close()


async def wait_for_producers(workflow: Workflow, streams: list[str]) -> None:
    """Until an original producer of every stream has registered (the feed may start then)."""
    trust = Trust.of(workflow)
    async with RepositoryClient((workflow.repository.host, workflow.repository.port), token=trust.token,
                                tls=trust.client_tls()) as repository:
        await repository.wait_for_publishers(streams, STARTUP_TIMEOUT_S, producers=1)


async def replay(
    workflow_path: Path,
    workflow: Workflow,
    feed: Callable[[], Awaitable[Any]],
    record_dir: Path,
    *,
    quiet_s: float = QUIET_S,
    observer: Callable[[], Awaitable[None]] | None = None,
    only: list[str] | None = None,
    until_ended: bool = False,
    wire: str | None = None,
    pace: RecordPace = PACED,
    decode: bool = False,
    attach: bool = False,
    log_dir: Path | None = None,
    compress: bool = False,
) -> ReplayResult:
    """Run ``workflow``, record its outputs while ``feed()`` sends the input, stop when done.

    ``observer`` (e.g. a live summary) runs from the moment the workflow is up
    until the recording ends, and is cancelled then. ``only`` limits the
    recording to some streams (a benchmark must not measure the recorder).
    ``until_ended``: the feed ends every input stream (``pan simulate`` does), so every output that
    carries a watermark ends too and is waited for, however long a loaded machine takes; otherwise
    the recording stops once nothing moved for ``quiet_s``.
    ``wire``: the ``PAN_WIRE`` of the whole replay (``json``, ``auto``, ``arrow``), set for `pan run` and its
    peers too; the recorder reads Arrow pages under ``arrow`` alone (default: this process's own ``PAN_WIRE``,
    which they inherit). ``pace``: how eagerly the recorder reads (``UNPACED`` for a feed as fast as possible).
    ``decode``: the recorder decodes every tuple and encodes it again (`Recorder`).
    ``attach``: the workflow runs already (e.g. on many hosts, `pan deploy up`): start no peers, only wait for
    its producers, feed and record (``wire`` then sets only the recorder's format).
    ``log_dir``: where `pan run` and each of its children write their output (default ``record_dir/logs``).
    ``compress``: the recording's files are zstd-compressed (``simulator/recording.py``).
    Should any of them end before the replay does, the replay stops at once with `WorkflowStopped`.
    """
    log_dir = record_dir / "logs" if log_dir is None else log_dir
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / FAILED_FILE).unlink(missing_ok=True)
    streams = output_streams(workflow)
    if only is not None:
        streams = [s for s in streams if s in only]
    started = time.monotonic()
    run, lifeline = (None, None) if attach else await _start_workflow(workflow_path, wire, log_dir)
    recorder = Recorder(workflow, streams, record_dir, wire=None if wire is None else recorder_wire(wire),
                        pace=pace, decode=decode, compress=compress)
    watching: asyncio.Task[None] | None = None
    timing: dict[str, float] = {}
    failures: dict[str, dict[str, str]] = {}
    cpu: dict[str, float] = {}

    async def run_through() -> Any:
        nonlocal watching
        await wait_for_producers(workflow, streams)
        await recorder.start()
        await recorder.holding(STARTUP_TIMEOUT_S)
        if observer is not None:
            watching = asyncio.create_task(observer(), name="replay observer")
        timing["feed_started"] = time.monotonic()
        cpu["before_feed"] = time.process_time()
        summary = await feed()
        timing["feed_s"] = time.monotonic() - timing["feed_started"]
        await _wait_until_quiet(recorder, quiet_s, until_ended)
        timing["recorded_s"] = time.monotonic() - timing["feed_started"]
        cpu["until_recorded"] = time.process_time() - cpu["before_feed"]
        failures.update(await failed_tasks(workflow))
        return summary

    try:
        summary = await (run_through() if run is None else _unless_stopped(run_through(), run, log_dir))
    finally:
        if watching is not None:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
        await recorder.stop()
        if run is not None and lifeline is not None:
            await _stop_workflow(run, lifeline)
    missed = {s: sub.stats.missed for s, sub in recorder.subscribers.items() if sub.stats.missed}
    return ReplayResult(dict(recorder.counts), summary, time.monotonic() - started, timing["feed_s"], missed,
                        recorder.wire, timing["recorded_s"], failures, cpu, recorder.requests(), recorder.json_bytes())


def recorder_wire(wire: str) -> Wire:
    """The recorder's page format in a replay whose ``PAN_WIRE`` is ``wire``: Arrow only under ``arrow`` (under
    ``auto`` it reads line pages, as it does under ``json``)."""
    return "arrow" if wire == "arrow" else "json"


async def _start_workflow(workflow_path: Path, wire: str | None,
                          log_dir: Path) -> tuple[asyncio.subprocess.Process, Lifeline]:
    """`pan run` of the workflow, logging into ``log_dir`` and ending at its first child's end (``--fail-fast``);
    it dies with us, even if we are SIGKILLed (see pan/launch/lifeline.py)."""
    lifeline = Lifeline()
    try:
        env = None if wire is None else {**os.environ, WIRE_ENV: wire}
        with (log_dir / "run.log").open("ab") as run_log:  # the child keeps its own copy of the descriptor
            run = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "pan", "run", str(workflow_path), "--fail-fast", "--log-dir", str(log_dir),
                stdout=run_log, stderr=subprocess.STDOUT, **lifeline.spawn_options(env)
            )
    except BaseException:
        lifeline.close()
        raise
    return run, lifeline


async def _stop_workflow(run: asyncio.subprocess.Process, lifeline: Lifeline) -> None:
    if run.returncode is None:
        run.send_signal(signal.SIGTERM)
    try:
        async with asyncio.timeout(30):
            await run.wait()
    except TimeoutError:
        run.kill()
        await run.wait()
    finally:
        lifeline.close()


async def _unless_stopped(work: Awaitable[Any], run: asyncio.subprocess.Process, log_dir: Path) -> Any:
    """``work``'s result, or `WorkflowStopped` as soon as `pan run` ends first (``work`` is cancelled).

    ``work`` failing after a child of `pan run` ended (a feed whose forwarder is gone) is that child's failure too.
    """
    task = asyncio.ensure_future(work)
    ended = asyncio.create_task(run.wait(), name="pan run watch")
    try:
        await asyncio.wait({task, ended}, return_when=asyncio.FIRST_COMPLETED)
        child_failed = ended.done() or (log_dir / FAILED_FILE).exists()
        if task.done() and (task.exception() is None or not child_failed):
            return task.result()
        raise WorkflowStopped(stopped_reason(log_dir, run.returncode or 0))
    finally:
        for pending in (task, ended):
            if not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pending


async def _wait_until_quiet(recorder: Recorder, quiet_s: float, until_ended: bool) -> None:
    """Until every output ended and is recorded, or nothing moved for ``quiet_s``.

    With ``until_ended`` a stream that carries a watermark (``wm``) will end: it is waited for however
    long a loaded machine takes (up to ``MAX_DRAIN_S``), since stopping on a quiet spell would cut the
    recording where a starved process merely paused; only streams without a watermark end by quiet.
    """
    started = time.monotonic()
    last, last_change, reported = recorder.progress(), started, started
    limit = MAX_DRAIN_S if until_ended else MAX_QUIET_DRAIN_S
    while time.monotonic() - started < limit:
        await asyncio.sleep(END_CHECK_S)
        open_streams = recorder.not_ended()
        if not open_streams:
            return
        now, clock = recorder.progress(), time.monotonic()
        if now != last:
            last, last_change = now, clock
        ending = [s for s in open_streams if until_ended and recorder.subscribers[s].progress.wm is not None]
        if not ending and clock - last_change >= quiet_s:
            log.info("nothing moved for %.0f s; %d streams never ended (e.g. %s)",
                     quiet_s, len(open_streams), ", ".join(open_streams[:5]))
            return
        if clock - reported >= 60:
            reported = clock
            log.warning("still waiting for %d streams to end (e.g. %s)", len(ending or open_streams),
                        ", ".join((ending or open_streams)[:5]))
    log.warning("outputs still changing after %.0f s; stopping anyway", limit)
