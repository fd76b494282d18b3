"""A stateful worker that stops without warning and starts again from its checkpoint, over real HTTP: its
subscriber reads on from its position, with no reset and no gap, and gets the undisturbed tuples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pan.config.trust import Trust
from pan.input.subscriber import StreamSubscriber
from pan.repository.server import RepositoryServer
from pan.wire.progress import END_OF_STREAM, StreamProgress
from pan.worker.recovery import StateOptions
from pan.worker.worker import Worker
from tests.conftest import HOST, WorkerGroup, forwarder, make_workflow, wait_until
from tests.pan.ordering.test_ordering_http import ordered
from tests.pan.state.test_component_checkpoints import events  # (and registers its test_counter type)

EVERY_S = 10.0


def expected(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the counter emits: the inputs merged by (ts, input position), each with its key's count so far."""
    counts: dict[str, int] = {}
    total, out = 0, []
    for event in sorted([*a, *b], key=lambda e: (e["ts"], e["k"][0])):  # A before B at equal ts
        counts[event["k"]] = counts.get(event["k"], 0) + 1
        total += event["v"]
        out.append({"ts": event["ts"], "k": event["k"], "n": counts[event["k"]], "total": total})
    return out


async def test_a_restarted_worker_goes_on_from_its_checkpoint_and_its_reader_sees_no_reset(
    repository: RepositoryServer, workers: WorkerGroup, tmp_path: Path
) -> None:
    workflow = make_workflow(repository.port, [forwarder("F", ["A", "B"], buffer_size=100_000),
                                               ordered("C", "test_counter", ["A", "B"], clock_mode="watermark")])
    (fwd,) = await workers.start(workflow, ["F"])
    spec = next(s for s in workflow.workers if s.name == "C")
    state = StateOptions(tmp_path / "state", "test", EVERY_S)

    def counter() -> Worker:
        return Worker(spec, workflow.repository, trust=Trust.of(workflow), state=state)

    a, b = events("A", 3000), events("B", 2000)  # 210 s and 220 s of event time
    first = counter()
    await first.start()
    read: list[dict[str, Any]] = []
    # A lossless reader (as a recorder is) that lags: the restarted worker must produce again what it had not read.
    async with StreamSubscriber("COUNTS", (HOST, repository.port), page_size=500, max_wait_ms=200,
                                request_timeout_s=30, hold="reader") as subscriber:

        async def read_until(count: int) -> None:
            async def enough() -> bool:
                batch = await subscriber.fetch()
                read.extend(batch.tuples)
                return len(read) >= count
            await wait_until(enough, timeout_s=120)

        read.extend((await subscriber.fetch()).tuples)  # connected from the start: holds from index 0
        for start in range(0, 1500, 100):  # in pieces, so that checkpoints fall between them
            fwd.outputs["A"].extend(a[start:start + 100])
            fwd.outputs["B"].extend(b[start * 2 // 3:(start + 100) * 2 // 3])
            await wait_until(lambda start=start: first.component.cursors["A"].position == start + 99,  # type: ignore[attr-defined]
                             timeout_s=60)
            if start % 300 == 0:  # the reader lags: it reads one page now and then
                read.extend((await subscriber.fetch()).tuples)
        files = first.component._checkpoints  # type: ignore[attr-defined]
        assert files is not None and files.written >= 3, "checkpoints every 10 s of event time"
        produced = first.outputs["COUNTS"].next_index
        await first.stop()  # stops without warning: what it did after its last checkpoint is lost
        checkpoint = files.latest()
        assert checkpoint is not None

        second = counter()
        try:
            assert second.epoch == first.epoch  # the same stream to its readers, not a restarted one
            resumed_at = second.outputs["COUNTS"].next_index
            assert resumed_at <= produced  # it produces again what came after its checkpoint
            await second.start()
            fwd.outputs["A"].extend(a[1500:])
            fwd.outputs["B"].extend(b[1000:])
            for stream in ("A", "B"):
                fwd.outputs[stream].publish(StreamProgress(epoch=fwd.epoch, wm=END_OF_STREAM))
            await read_until(5000)
        finally:
            await second.stop()
        stats = subscriber.state.stats
    assert [{k: v for k, v in t.items() if k != "i"} for t in read] == expected(a, b)
    assert [t["i"] for t in read] == list(range(5000))
    assert (stats.resets, stats.missed) == (0, 0)
    assert resumed_at < produced, "the restarted worker produced again what came after its checkpoint"
