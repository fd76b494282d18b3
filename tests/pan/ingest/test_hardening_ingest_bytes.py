"""Issue 10, ingest side, finding 6: byte budgets.  Rows are bounded in bytes, a stream's buffer holds at most
its budget, and readers see what was dropped for it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pan.buffers.streams import OutputStream
from pan.config.specs import WorkflowError
from pan.repository.server import RepositoryServer
from pan.wire.progress import EMPTY
from pan.workflow.parser import parse_workflow
from tests.conftest import WorkerGroup, forwarder, get_json, wait_until, workflow_dict
from tests.pan.ingest.ingest_forwarder import counters, data_page, held, json_row, send, start_forwarder


async def test_large_rows_are_bounded_in_bytes_and_readers_see_what_was_dropped(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    budget = 200_000
    worker = await start_forwarder(repository, workers, buffer_bytes=budget, params={"max_row_bytes": 16_384})
    pad = {f"p{k}": "x" * 2500 for k in range(4)}  # strings are bounded too (pan.ingest.schema.MAX_STRING_CHARS)
    rows = [json_row("INTERRUPTIONS", ts=n, **pad) for n in range(100)]  # ~10 KB each, ~1 MB in all
    await send(worker, [*rows, json_row("INTERRUPTIONS", ts=100, **pad, **{k + "b": v for k, v in pad.items()})])
    await wait_until(lambda: counters(worker)["rows"] == 100 and counters(worker)["rejected"])
    assert counters(worker)["rejected"] == {"row_too_large": 1} and counters(worker)["oversized"] == 0
    output = worker.outputs["INTERRUPTIONS"]
    assert output.held_bytes == sum(map(len, held(worker, "INTERRUPTIONS")))
    assert budget - 10_100 < output.held_bytes <= budget
    assert output.buffer.first > 0 and output.buffer.last == 99
    page = await data_page(worker, "INTERRUPTIONS")
    assert page["missed"] == page["first"] == output.buffer.first == output.dropped_for_bytes
    assert [t["ts"] for t in page["tuples"]] == list(range(page["first"], 100))
    _, info = await get_json(f"http://127.0.0.1:{worker.server.port}/streams")
    described = info["outputs"]["INTERRUPTIONS"]
    assert described["held_bytes"] == output.held_bytes and described["byte_budget"] == budget


def test_the_newest_tuple_is_kept_even_when_it_alone_exceeds_the_budget() -> None:
    output = OutputStream("S", capacity=100, byte_budget=1024)
    output.extend([{"pad": "x" * 100}] * 5)
    output.extend([{"pad": "x" * 5000}])
    assert len(output.buffer) == 1 and output.buffer.last == 5 and output.held_bytes > 1024
    assert output.buffer.read(-1).missed == 5


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 30), st.integers(0, 400)), max_size=60))
def test_held_bytes_always_match_what_the_buffer_holds(ops: list[tuple[int, int, int]]) -> None:
    """Appends with gaps (as repeaters do), batches, ring overwrites, budget drops and resets keep the count exact."""
    output = OutputStream("S", capacity=16, byte_budget=1500)
    for kind, count, size in ops:
        if kind == 0:
            output.extend([{"p": "x" * size}] * count)
        elif kind == 1:
            output.append({"p": "x" * size}, output.next_index + count - 1)  # after a gap of count - 1
        elif kind == 2:
            output.append({"p": "x" * size})
        elif count == 1:
            output.reset(EMPTY)
        page = output.buffer.read(-1, oldest=1000)
        assert output.held_bytes == sum(map(len, page.items))
        assert output.held_bytes <= 1500 or len(page.items) == 1


def test_buffer_bytes_is_validated() -> None:
    with pytest.raises(WorkflowError, match="buffer_bytes' must be an integer in 1024"):
        parse_workflow(workflow_dict(1, [forwarder("F", ["S"], buffer_bytes=10)]))
