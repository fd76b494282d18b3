"""The sensor simulator: replays a `pan split` folder as live sensors into a workflow.

Each sensor is an independent transmitter with its own TCP connection to the
worker the workflow names as its receiver, all driven by one asyncio loop.
Pacing follows a time provider (local time or WeakTrueTime), so several
simulator processes on several machines replay the same moment of the match
at the same moment: every check period each sensor sends, in one write,
every row whose due time has passed.  ``speedup`` 0 drops pacing and sends
as fast as the receivers take it, still per sensor and in ts order.

Nothing a receiver does stops the simulation.  A sensor silent in event time
sends promises, and one whose data is exhausted an end promise before it
closes, so receivers never have to declare a replayed sensor idle on wall
time, and a replay's results do not depend on how fast it runs.

This module selects the streams and runs the replay; one sensor's sending and
promises are in ``simulator/sensor_runner.py``, its connection in
``simulator/sensor_link.py``, the pacing in ``simulator/simulate_pacing.py``,
the options in ``simulator/simulate_options.py`` and the report in
``simulator/simulate_summary.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from pathlib import Path

from pan.config.specs import Workflow, ingest_port, inter_pan_inputs
from pan.ingest.lines import promise_line
from pan.ingest.server import send_lines
from simulator.clock import TimeProvider
from simulator.impair import SensorImpairment
from simulator.send_log import SendLog
from simulator.sensor_link import Link
from simulator.sensor_runner import SensorRunner
from simulator.simulate_options import SimulateError, SimulateOptions
from simulator.simulate_pacing import UNPACED_SLICE_PS, EventTimeGate, Pacer
from simulator.simulate_progress import Progress
from simulator.simulate_summary import StreamStats, Summary
from simulator.sources import (
    INTERRUPTIONS_FILE,
    INTERRUPTIONS_STREAM,
    RowSource,
    Timeline,
    first_ts,
    halftime_break,
    interruption_lines,
    last_ts,
    sensor_files,
)
from simulator.wtt import WTTMaster, WTTSlaveTime

log = logging.getLogger(__name__)

# INTERRUPTIONS heartbeats every 10 ms of event time: consumers of the sparse stream release events
# only once it has moved past them, so the period is a floor under their query delay.
HEARTBEAT_PS = 10 * 10**9


def _select(data_dir: Path, wanted: list[str] | None) -> tuple[dict[str, Path], bool, list[str]]:
    """(sensor files to replay, whether to feed INTERRUPTIONS, errors)."""
    files = sensor_files(data_dir)
    has_interruptions = (data_dir / INTERRUPTIONS_FILE).is_file()
    if wanted is None:
        return files, has_interruptions, []
    chosen: dict[str, Path] = {}
    errors = []
    feed_interruptions = False
    for name in wanted:
        stream = f"SENSOR{name}" if name.isdigit() else name
        if stream == INTERRUPTIONS_STREAM:
            feed_interruptions = has_interruptions
            if not has_interruptions:
                errors.append(f"{INTERRUPTIONS_STREAM}: no {INTERRUPTIONS_FILE} in {data_dir}")
        elif stream in files:
            chosen[stream] = files[stream]
        else:
            errors.append(f"{stream}: no file {stream}.csv in {data_dir}")
    return chosen, feed_interruptions, errors


def _share(files: dict[str, Path], interruptions: bool, k: int, n: int) -> tuple[dict[str, Path], bool]:
    """The K-th of N shares of ``files``, dealt round robin in name order; INTERRUPTIONS goes with share 0."""
    names = sorted(files)
    return {name: files[name] for name in names[k::n]}, interruptions and k == 0


def _routed_sensors_without_data(workflow: Workflow, files: dict[str, Path]) -> list[str]:
    """Sensors the workflow receives that this data set never sends (e.g. a ball not used in it)."""
    routed = [stream for spec in workflow.workers for stream in inter_pan_inputs(spec)]
    return [stream for stream in routed if stream.startswith("SENSOR") and stream not in files]


async def _promise_no_data(workflow: Workflow, streams: list[str], timeout_s: float) -> list[str]:
    """Tell each receiver that these sensors will send nothing (errors are reported, never fatal).

    Without the promise, ordering units downstream would wait for them until
    the receiver declared them idle (its ``idle_after_ms``), a wall-clock rule
    a replay must never depend on. One connection per receiver carries all its promises.
    """
    by_receiver: dict[tuple[str, int], list[str]] = {}
    for stream in streams:
        spec = workflow.ingest_receiver(stream)
        port = None if spec is None else ingest_port(spec)
        assert spec is not None and port is not None
        by_receiver.setdefault((spec.host, port), []).append(stream)
    errors = []
    for (host, port), promised in by_receiver.items():
        try:
            await send_lines(host, port, [promise_line(stream) for stream in promised], timeout_s=timeout_s)
        except (OSError, TimeoutError) as exc:
            errors.append(f"{', '.join(promised)}: no-data promise to {host}:{port} failed: {exc}")
    return errors


async def _start_clock(opts: SimulateOptions) -> tuple[TimeProvider, WTTMaster | WTTSlaveTime | None]:
    if opts.wtt_master is not None:
        master = WTTMaster(*opts.wtt_master, clock=opts.clock)
        await master.start()
        return master, master
    if opts.wtt_slave is not None:
        slave = WTTSlaveTime(opts.wtt_slave, clock=opts.clock)
        await slave.start()
        if not await slave.wait_synced(opts.wtt_sync_timeout_s):
            await slave.stop()
            host, port = opts.wtt_slave
            raise SimulateError(f"no time from WTT master {host}:{port} within {opts.wtt_sync_timeout_s} s")
        return slave, slave
    return opts.clock, None


def interruptions_source(data_dir: Path, **filters: object) -> RowSource:
    """The INTERRUPTIONS stream of a split folder as fed: its spans' begin and end events, and a heartbeat every
    ``HEARTBEAT_PS`` over the sensor data's span."""
    data_files = sensor_files(data_dir)
    span = (first_ts(data_dir, data_files), last_ts(data_dir, data_files))
    beat = (span[0], span[1], HEARTBEAT_PS) if None not in span else None
    lines = interruption_lines(data_dir / INTERRUPTIONS_FILE, beat)  # type: ignore[arg-type]
    return RowSource(INTERRUPTIONS_STREAM, iter([b"".join(lines)] if lines else []), json_lines=True, **filters)


async def simulate(opts: SimulateOptions) -> Summary:
    """Replay the selected streams of ``opts.data_dir`` into ``opts.workflow``; returns what happened."""
    if opts.speedup < 0:
        raise SimulateError("speedup must be >= 0")
    if not opts.data_dir.is_dir():
        raise SimulateError(f"data folder not found: {opts.data_dir}")
    files, feed_interruptions, errors = _select(opts.data_dir, opts.sensors)
    every_file = files
    if opts.share is not None:
        files, feed_interruptions = _share(files, feed_interruptions, *opts.share)
    origin = first_ts(opts.data_dir, sensor_files(opts.data_dir))
    if opts.from_ts is not None:
        origin = opts.from_ts if origin is None else max(origin, opts.from_ts)
    gap = halftime_break(sensor_files(opts.data_dir), *opts.halftime) if opts.skip_halftime else None
    filters = {"lo": opts.from_ts, "hi": opts.to_ts, "gap": gap}

    sources: dict[str, RowSource] = {s: RowSource.from_file(s, p, **filters) for s, p in files.items()}
    if feed_interruptions:
        sources[INTERRUPTIONS_STREAM] = interruptions_source(opts.data_dir, **filters)
        if origin is None:
            origin = sources[INTERRUPTIONS_STREAM].peek_ts()
    if origin is None:
        origin = 0
    timeline = Timeline(origin, opts.speedup, gap)
    span_ns = int(3 * 3600 * 1e9 / (opts.speedup or 1.0))  # bounds how early a drifting clock can send

    clock, wtt = await _start_clock(opts)
    send_log = SendLog(opts.send_log) if opts.send_log is not None else None
    streams: dict[str, StreamStats] = {}
    unrouted: list[str] = []
    runners: list[SensorRunner] = []
    frontier: dict[str, int] = {}
    for stream, source in sources.items():
        spec = opts.workflow.ingest_receiver(stream)
        port = None if spec is None else ingest_port(spec)
        if spec is None or port is None:
            unrouted.append(stream)
            continue
        stats = StreamStats(receiver=f"{spec.host}:{port}")
        streams[stream] = stats
        link = Link(stream, spec.host, port, stats, opts.connect_timeout_s)
        params = opts.impair.for_stream(stream) if opts.impair is not None else None
        impairment = None
        if params is not None and opts.impair is not None:
            sid = int(stream.removeprefix("SENSOR"))
            impairment = SensorImpairment(params, opts.impair.seed, sid, timeline.due_ns, origin, span_ns)
        runners.append(SensorRunner(stream, source, link, stats, timeline, impairment, opts, send_log, frontier))
    if unrouted:
        log.warning("no receiver in workflow %r for %s: skipped", opts.workflow.name, ", ".join(unrouted))
    # Sensors the workflow routes but the data lacks are promised ended once: by the only simulator, or share 0.
    first_share = opts.share is None or opts.share[0] == 0
    no_data = _routed_sensors_without_data(opts.workflow, every_file) if opts.sensors is None and first_share else []

    progress_task = None
    started_mono = time.monotonic()
    start_ns = clock.now_ns()
    braking = contextlib.AsyncExitStack()
    try:
        await asyncio.gather(*(r.link.ensure(force=True) for r in runners))
        start_ns = opts.start_at_ms * 1_000_000 if opts.start_at_ms is not None else (
            clock.now_ns() + int(opts.lead_ms * 1e6))
        if start_ns < clock.now_ns() - 1_000_000_000:
            log.warning("start time lies %.1f s in the past: catching up", (clock.now_ns() - start_ns) / 1e9)
        pacer = Pacer(clock, start_ns, max(1, int(opts.check_period_ms * 1e6)), opts.brake)
        if opts.brake is not None:
            await braking.enter_async_context(opts.brake)
        await pacer.wait_start()
        started_mono = time.monotonic()
        if opts.progress:
            end_ts = last_ts(opts.data_dir, files) if files else None
            if end_ts is not None and opts.to_ts is not None:
                end_ts = min(end_ts, opts.to_ts)
            progress = Progress(runners, timeline, opts.progress_out or sys.stderr, end_ts)
            progress_task = asyncio.create_task(progress.run())
        errors += await _promise_no_data(opts.workflow, no_data, opts.connect_timeout_s)
        gate = EventTimeGate(origin, UNPACED_SLICE_PS, len(runners), gap)
        await asyncio.gather(*(r.run(pacer, gate) for r in runners))
    finally:
        elapsed = time.monotonic() - started_mono
        await braking.aclose()
        if progress_task is not None:
            progress_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await progress_task
        for r in runners:
            await r.link.close()
        if send_log is not None:
            send_log.close()
        wtt_status = None
        if isinstance(wtt, WTTSlaveTime):
            wtt_status = {"role": "slave", **wtt.status()}
        elif isinstance(wtt, WTTMaster):
            wtt_status = {"role": "master", "port": wtt.port, "slaves": len(wtt.slaves)}
        if wtt is not None:
            await wtt.stop()
    for name, stats in streams.items():
        if stats.sent == 0 and stats.error:
            errors.append(f"{name}: {stats.error}")
    newest = max((s.last_ts for s in streams.values() if s.last_ts is not None), default=None)
    event_s = 0.0 if newest is None else timeline.due_one(newest) * (opts.speedup or 1.0) / 1e9
    held = None if opts.brake is None else opts.brake.stats.as_dict()
    return Summary(streams, unrouted, errors, elapsed, start_ns, origin, opts.speedup, wtt_status, no_data,
                   event_s, held)
