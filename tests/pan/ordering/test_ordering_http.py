"""Ordering units inside real workers, talking over HTTP.

Three levels: L1 merges A with a delayed stream B; L2 back-dates L1's output
(like a detector that reports an event after the fact); L3 merges L2's output
with a fresh stream C.  The producer feeds in real time, so delays are real.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any, ClassVar

import orjson
import pytest

from pan.components.catalog import register
from pan.components.ordered import READ_BATCH, OrderedComponent
from pan.config.specs import WorkerSpec
from pan.http.addresses import free_port
from pan.repository.server import RepositoryServer
from pan.worker.worker import Worker
from tests.conftest import HOST, WorkerGroup, forwarder, get_json, make_workflow, wait_until
from tests.support import prometheus

PS_PER_MS = 10**9
NEVER_IDLE = {"clock_mode": "watermark"}  # ordering units rely on the data and promises alone
BACKDATE_MS = 20
STEP_MS = 2
STALL_MARGIN_MS = 20


@register
class BackDate(OrderedComponent):
    """Test-only detector: re-emits each event ``shift_ms`` earlier in event time."""

    type_name = "test_backdate"
    own_params: ClassVar[tuple[str, ...]] = ("output", "shift_ms")

    @classmethod
    def main_outputs(cls, spec: WorkerSpec) -> list[str]:
        return [spec.params["output"]]

    def process(self, events: list[dict[str, Any]]) -> None:
        shift = self.params["shift_ms"] * PS_PER_MS
        self.ctx.outputs[self.params["output"]].extend(
            [{**event, "ts": event["ts"] - shift, "src_ts": event["ts"]} for event in events]
        )


@register
class GatedMerge(OrderedComponent):
    """Test-only merge that starts reading its inputs only when ``GATE`` opens (a busy component)."""

    type_name = "test_gated_merge"
    own_params: ClassVar[tuple[str, ...]] = ("output",)
    gate: ClassVar[asyncio.Event]

    @classmethod
    def main_outputs(cls, spec: WorkerSpec) -> list[str]:
        return [spec.params["output"]]

    async def run(self) -> None:
        await self.gate.wait()
        await super().run()

    def process(self, events: list[dict[str, Any]]) -> None:
        self.ctx.outputs[self.params["output"]].extend(events)


def ordered(name: str, type_name: str, inputs: list[str], **params: Any) -> dict[str, Any]:
    return {"name": name, "type": type_name, "host": HOST, "port": free_port(), "inputs": inputs, "params": params}


def hierarchy(notices: bool, lam: float, min_k_ms: int = 0) -> list[dict[str, Any]]:
    common = {"lambda": lam, "window": 400, "notices": notices, "min_k": min_k_ms * PS_PER_MS}
    return [
        forwarder("F", ["A", "B", "C"], buffer_size=200_000),
        ordered("L1", "merge", ["A", "B"], output="X", clock=["A"], **common),
        ordered("L2", "test_backdate", ["X"], output="Y", shift_ms=BACKDATE_MS, **common),
        ordered("L3", "merge", ["Y", "C"], output="Z", **common),
    ]


async def feed(producer: Worker, start_ms: int, end_ms: int, delay_b_ms: Callable[[int], int]) -> None:
    """Real-time feed of event time [start_ms, end_ms): A and C on time, B ``delay_b_ms(t)`` late."""
    started = time.monotonic()
    t = start_ms
    pending_b: list[tuple[int, int]] = []  # (due ms, ts ms)

    def release_b(until_ms: float) -> None:
        nonlocal pending_b
        due = sorted((p for p in pending_b if p[0] <= until_ms), key=lambda p: p[1])
        pending_b = [p for p in pending_b if p[0] > until_ms]
        for _, ts in due:
            producer.outputs["B"].append({"ts": ts * PS_PER_MS, "src": "B"})

    while t < end_ms or pending_b:
        now_ms = start_ms + (time.monotonic() - started) * 1000
        while t <= now_ms and t < end_ms:
            producer.outputs["A"].append({"ts": t * PS_PER_MS, "src": "A"})
            producer.outputs["C"].append({"ts": t * PS_PER_MS, "src": "C"})
            pending_b.append((t + delay_b_ms(t), t))
            t += STEP_MS
        release_b(now_ms if t < end_ms else float("inf"))
        await asyncio.sleep(0.001)


async def ordering_of(worker: Worker) -> dict[str, Any]:
    _, info = await get_json(f"http://127.0.0.1:{worker.server.port}/streams")
    return info["component"]["ordering"]


class StallMonitor:
    """Measures the longest time this process did not run (the feed, the workers and the test share it).

    Max mode learns K from the delays it sees; a stall longer than its margin delays
    events beyond any K learnt before, so lateness in such a run says nothing about K.
    """

    PERIOD_S = 0.005

    def __init__(self) -> None:
        self.longest_ms = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _watch(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(self.PERIOD_S)
            self.longest_ms = max(self.longest_ms, (time.monotonic() - before - self.PERIOD_S) * 1000)

    async def __aenter__(self) -> StallMonitor:
        self._task = asyncio.create_task(self._watch())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def run_hierarchy(
    repository: RepositoryServer,
    workers: WorkerGroup,
    notices: bool,
    delay_b_ms: Callable[[int], int],
    duration_ms: int,
    warm_up_ms: int = 600,
    lam: float = 0.5,
    min_k_ms: int = 0,
) -> dict[str, Any]:
    producer, l1, l2, l3 = await workers.start(make_workflow(repository.port, hierarchy(notices, lam, min_k_ms)))
    await feed(producer, 0, warm_up_ms, delay_b_ms)
    await wait_until(lambda: l3.outputs["Z"].buffer.last > 0)
    stalls = StallMonitor()
    async with stalls:
        await feed(producer, warm_up_ms, warm_up_ms + duration_ms, delay_b_ms)
        await asyncio.sleep(0.5)
    result: dict[str, Any] = {w.spec.name: await ordering_of(w) for w in (l1, l2, l3)}
    # Late events are counted by when the producer made them, not when L3 found them late: an event of
    # the warm-up that came behind what L3 had released waits in its buffer for K (up to a second while
    # K still carries the start-up delays) and is only then counted, well after the warm-up ended.
    late = [orjson.loads(b) for b in l3.outputs["Z_late"].buffer.read(-1, oldest=10**6).items]
    result["late_after_warm_up"] = sum(e.get("src_ts", e["ts"]) >= warm_up_ms * PS_PER_MS for e in late)
    assert len(late) == result["L3"]["late"]  # every late event is on the side output
    result["longest_stall_ms"] = stalls.longest_ms
    result["z"] = [orjson.loads(b) for b in l3.outputs["Z"].buffer.read(-1, oldest=10**6).items]
    await workers.stop_all()
    return result


@pytest.mark.parametrize("notices", [True, False], ids=["notices", "no-notices"])
async def test_upper_k_covers_lower_k_plus_back_dating(
    repository: RepositoryServer, workers: WorkerGroup, notices: bool
) -> None:
    # lambda 3 and a 20 ms floor: margins for the scheduling jitter of a loaded test machine. A run in
    # which this process stalled for longer than that floor (seen in CI at load 8: 186 late) proves
    # nothing about K and is repeated; late events without such a stall fail at once.
    for _attempt in range(5):
        result = await run_hierarchy(
            repository, workers, notices, delay_b_ms=lambda t: 10, duration_ms=800, lam=3.0, min_k_ms=STALL_MARGIN_MS
        )
        late, stall_ms = result["late_after_warm_up"], result["longest_stall_ms"]
        assert late == 0 or stall_ms > STALL_MARGIN_MS, f"{late} late without a stall (longest {stall_ms:.1f} ms)"
        if late == 0:
            break
    k1, k3 = result["L1"]["k"], result["L3"]["k"]
    assert k1 >= 8 * PS_PER_MS  # L1 learnt B's 10 ms delay
    assert k3 >= k1 + BACKDATE_MS * PS_PER_MS  # the upper K covers the lower K plus the back-dating hop
    assert result["late_after_warm_up"] == 0, f"every run stalled (last: {result['longest_stall_ms']:.0f} ms)"
    zs = [t["ts"] for t in result["z"]]
    assert zs == sorted(zs)


async def test_k_notice_prevents_late_events_that_happen_without_it(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    def jump(t: int) -> int:  # B's delay jumps from 5 ms to 120 ms at 900 ms of event time
        return 5 if t < 900 else 120

    # The feed is paced in wall time, so a burst of load elsewhere can starve the notice's hop; such a run
    # (seen once in CI: 150 late with notices, 129 without) is repeated, up to three times, same thresholds.
    for _attempt in range(3):
        with_notices = await run_hierarchy(repository, workers, True, jump, duration_ms=800)
        without = await run_hierarchy(repository, workers, False, jump, duration_ms=800)
        late_with, late_without = with_notices["late_after_warm_up"], without["late_after_warm_up"]
        if late_without > 20 and late_with < late_without / 2:
            break
    # Without notices L3 only learns of L1's bigger K from late events; with them it grows first.
    assert without["late_after_warm_up"] > 20
    assert with_notices["late_after_warm_up"] < without["late_after_warm_up"] / 2
    assert with_notices["L3"]["notices_applied"] > 0 and without["L3"]["notices_applied"] == 0


async def test_quiet_clock_stream_is_moved_on_by_the_forwarders_idle_promise(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    """Max mode, clock SENSOR4: when it goes quiet the forwarder (not the merge) declares it idle."""
    idle_ms = 1500
    fwd = forwarder("F", ["SENSOR4", "SENSOR8"], params={"idle_after_ms": idle_ms})
    spec = ordered("L1", "merge", ["SENSOR4", "SENSOR8"], output="X", clock=["SENSOR4"])
    producer, merger = await workers.start(make_workflow(repository.port, [fwd, spec]))

    def released_up_to() -> int:
        page = merger.outputs["X"].buffer.read(-1, latest=1)
        return orjson.loads(page.items[0])["ts"] if page.items else -1

    _, writer = await asyncio.open_connection("127.0.0.1", fwd["params"]["ingest_port"])
    try:
        def rows(sid: int, start_ms: int, end_ms: int) -> bytes:
            times = range(start_ms * PS_PER_MS, end_ms * PS_PER_MS, STEP_MS * PS_PER_MS)
            return "".join(f"{sid},{t},0,0,0,0,0,0,0,0,0,0,0\n" for t in times).encode()

        # SENSOR8 first (so that none of it comes after the clock moved), then the clock sensor,
        # which then goes quiet at 98 ms.
        writer.write(rows(8, 0, 400))
        await writer.drain()
        await wait_until(lambda: merger.inputs["SENSOR8"].buffer.last == 199)
        writer.write(rows(4, 0, 100))
        await writer.drain()
        await wait_until(lambda: merger.inputs["SENSOR4"].buffer.last == 49)
        # SENSOR8 is still there (a keep-alive promise keeps it active); past SENSOR4's last row
        # (98 ms, minus K) only through SENSOR4's idle promise.
        for _ in range(400):
            writer.write(b'{"stream":"SENSOR8","ts":%d,"promise":true}\n' % (398 * PS_PER_MS))
            await writer.drain()
            if released_up_to() > 150 * PS_PER_MS:
                break
            await asyncio.sleep(0.05)
        await wait_until(lambda: released_up_to() > 150 * PS_PER_MS, timeout_s=10)
    finally:
        writer.close()
    info = await ordering_of(merger)
    assert info["promise_advances"] >= 1 and info["late"] == 0
    _, streams = await get_json(f"http://127.0.0.1:{producer.server.port}/streams")
    assert streams["component"]["idle_declared"] >= 1 and streams["component"]["idle_promises"] >= 1


async def test_ordering_numbers_in_metrics_and_meta(repository: RepositoryServer, workers: WorkerGroup) -> None:
    spec = ordered("L1", "merge", ["A", "B"], output="X")
    producer, merger = await workers.start(make_workflow(repository.port, [forwarder("F", ["A", "B", "C"]), spec]))
    for t in range(50):
        producer.outputs["A"].append({"ts": t * PS_PER_MS})
        producer.outputs["B"].append({"ts": (t - 5) * PS_PER_MS})  # 5 ms behind
    await wait_until(lambda: merger.outputs["X"].buffer.last >= 40)
    base = f"http://127.0.0.1:{merger.server.port}"
    _, metrics = await get_json(f"{base}/metrics")
    for name in ("pan_component_ordering_k", "pan_component_ordering_clk", "pan_component_ordering_buffered",
                 "pan_component_ordering_late"):
        assert prometheus.value(metrics, name, worker="L1") >= 0
    assert prometheus.value(metrics, "pan_ordering_delay_seconds_bucket", worker="L1", le="+Inf") > 0
    _, data = await get_json(f"{base}/data", s="X", l=1)
    assert data["meta"]["k"] >= 5 * PS_PER_MS and data["meta"]["epoch"] == merger.epoch


async def test_sparse_upstream_stream_advances_the_watermark(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    """A derived stream with rare events promises progress through its /data meta ("wm")."""
    specs = [
        forwarder("F", ["A", "B", "C"]),
        ordered("U", "merge", ["B"], output="SPARSE", **NEVER_IDLE),
        ordered("L", "merge", ["A", "SPARSE"], output="X", **NEVER_IDLE),
    ]
    producer, _, lower = await workers.start(make_workflow(repository.port, specs))
    producer.outputs["B"].append({"ts": 0, "src": "B"})
    for t in range(1, 200):
        producer.outputs["A"].append({"ts": t * PS_PER_MS, "src": "A"})
        if t % 50 == 0:  # SPARSE gets an event every 50 ms only, yet L must follow A closely
            producer.outputs["B"].append({"ts": t * PS_PER_MS, "src": "B"})

    def released_up_to() -> int:
        page = lower.outputs["X"].buffer.read(-1, latest=1)
        return orjson.loads(page.items[0])["ts"] if page.items else -1

    # Without promises L would wait for SPARSE for a minute (idle_timeout); with them it follows A.
    await wait_until(lambda: released_up_to() >= 140 * PS_PER_MS, timeout_s=10)
    assert (await ordering_of(lower))["late"] == 0


async def merge_of_two_sensors(
    repository: RepositoryServer, workers: WorkerGroup
) -> tuple[dict[str, Any], Worker, Worker]:
    """Forwarder F receives SENSOR4 and SENSOR8; M merges them and never gives up waiting on one."""
    fwd = forwarder("F", ["SENSOR4", "SENSOR8"])
    producer, merger = await workers.start(
        make_workflow(repository.port, [fwd, ordered("M", "merge", ["SENSOR4", "SENSOR8"], output="X", **NEVER_IDLE)])
    )
    return fwd, producer, merger


async def test_end_lines_end_the_streams(repository: RepositoryServer, workers: WorkerGroup) -> None:
    """The end of the data is said explicitly and seen from the data: no wall-clock flush is needed."""
    from pan.ingest.lines import END_OF_STREAM, promise_line
    from pan.ingest.server import send_lines

    fwd, producer, merger = await merge_of_two_sensors(repository, workers)
    rows = {sid: [f"{sid},{t},0,0,0,0,0,0,0,0,0,0,0".encode() for t in range(sid, 400, 10)] for sid in (4, 8)}
    await send_lines("127.0.0.1", fwd["params"]["ingest_port"], rows[4])  # each call: one connection, closed at the end
    await send_lines("127.0.0.1", fwd["params"]["ingest_port"], rows[8])
    await wait_until(lambda: merger.outputs["X"].buffer.last >= 0, timeout_s=10)
    await asyncio.sleep(0.3)
    assert merger.outputs["X"].buffer.last < 79  # closed connections end nothing: the last rows are held
    assert producer.outputs["SENSOR4"].progress.wm is None
    await send_lines("127.0.0.1", fwd["params"]["ingest_port"], [promise_line("SENSOR4"), promise_line("SENSOR8")])
    await wait_until(lambda: merger.outputs["X"].buffer.last == 79, timeout_s=10)
    merged = [orjson.loads(b)["ts"] for b in merger.outputs["X"].buffer.read(-1, oldest=100).items]
    assert merged == sorted(merged) and len(merged) == 80
    assert producer.outputs["SENSOR4"].progress.wm == END_OF_STREAM
    await wait_until(lambda: merger.outputs["X"].progress.wm == END_OF_STREAM)  # the merge's output ended too


async def test_a_promise_line_releases_a_sensor_that_sends_nothing(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    """SENSOR8 never sends a row; its promise lets the merge follow SENSOR4 without any idle timeout."""
    from pan.ingest.lines import promise_line
    from pan.ingest.server import send_lines

    fwd, producer, merger = await merge_of_two_sensors(repository, workers)
    _, writer = await asyncio.open_connection("127.0.0.1", fwd["params"]["ingest_port"])  # SENSOR4 stays connected
    try:
        writer.write(b"".join(f"4,{t},0,0,0,0,0,0,0,0,0,0,0\n".encode() for t in range(100)))
        await writer.drain()
        await asyncio.sleep(0.3)
        assert merger.outputs["X"].buffer.last == -1  # SENSOR8 might still send: nothing can be released
        await send_lines("127.0.0.1", fwd["params"]["ingest_port"], [promise_line("SENSOR8")])
        # Released up to SENSOR4's newest ts (exclusive: another row with that ts could still come).
        await wait_until(lambda: merger.outputs["X"].buffer.last == 98, timeout_s=10)
        released = [orjson.loads(b)["ts"] for b in merger.outputs["X"].buffer.read(-1, oldest=100).items]
    finally:
        writer.close()
    assert released == list(range(99))
    assert producer.outputs["SENSOR8"].buffer.last == -1  # a promise is not data
    _, info = await get_json(f"http://127.0.0.1:{producer.server.port}/streams")
    assert info["component"]["promises"] == 1 and info["component"]["rows"] == 100


async def test_a_backlog_larger_than_the_input_buffer_is_pulled_without_loss(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    """The pull task waits for the component instead of overwriting input it has not read yet."""
    backlog = 120_000  # six times the merger's input buffer (INPUT_BUFFER_MIN), pulled 10,000 per fetch
    GatedMerge.gate = asyncio.Event()
    spec = ordered("M", "test_gated_merge", ["A"], output="X", **NEVER_IDLE)
    workflow = make_workflow(repository.port, [forwarder("F", ["A"], buffer_size=backlog), spec])
    producer, merger = await workers.start(workflow)
    producer.outputs["A"].extend([{"ts": t * PS_PER_MS, "src": "A"} for t in range(backlog)])
    await wait_until(lambda: merger.inputs["A"].buffer.last >= 0)
    await asyncio.sleep(0.5)  # time enough to fetch far more than the input buffer holds
    GatedMerge.gate.set()
    output = merger.outputs["X"]
    await wait_until(lambda: output.appended >= backlog - READ_BATCH, timeout_s=20)
    _, info = await get_json(f"http://127.0.0.1:{merger.server.port}/streams")
    assert info["component"]["input_missed"] == 0
    assert info["component"]["ordering"]["late"] == 0
    assert info["inputs"]["A"]["waits_for_reader"] >= 1  # the pull held off while the component was busy
    held = [orjson.loads(b)["ts"] for b in output.buffer.read(-1, oldest=output.buffer.capacity).items]
    first = output.appended - len(held)
    assert held == [t * PS_PER_MS for t in range(first, output.appended)]
