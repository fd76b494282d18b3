"""Column buffers (pan/buffers/column_ring.py): int64 rows that read exactly like the JSON tuples they replace."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import orjson
import pyarrow as pa
import pytest

from pan.buffers.column_ring import ColumnOutputStream, IntColumnRing, hot_rows_for
from pan.buffers.ringbuffer import RingBuffer
from pan.buffers.row_store import RowTable
from pan.buffers.streams import OutputStream
from pan.components.builtin import Forwarder
from pan.config.specs import WorkerSpec
from pan.ingest.schema import INT64_MAX, INT64_MIN
from pan.ingest.server import send_lines
from pan.input.fetcher import ACCEPT
from pan.input.subscriber import StreamSubscriber
from pan.repository.server import RepositoryServer
from pan.wire import arrow_pages, line_pages
from pan.wire.data_query import DataQuery
from pan.wire.int_csv import RowBlock, parse_block, render_values
from pan.wire.progress import EMPTY
from pan.worker.worker import Worker
from simulator.debs_rows import CSV_LAYOUT, SENSOR_FIELDS
from tests.conftest import HOST, WorkerGroup, forwarder, make_workflow, wait_until
from tests.pan.ingest.test_ingest_blocks import EXPECTED, MAX_ROW, fuzzed_input

WIDTH = len(SENSOR_FIELDS)


def random_rows(rng: random.Random, count: int, wide: float = 0.1) -> np.ndarray:
    """Rows of any int64 values, the extremes included (a share ``wide`` of them beyond 32 bits, or at its edges)."""
    pool = [INT64_MIN, INT64_MAX, -(2**31) - 1, 2**31, 10**12]
    narrow = [-(2**31), 2**31 - 1, -1, 0, 1]
    values = [rng.choice(pool) if rng.random() < wide else rng.choice(narrow) if rng.random() < 0.05
              else rng.randint(-(10**9), 10**9) for _ in range(count * WIDTH)]
    return np.array(values, dtype=np.int64).reshape(count, WIDTH)


def encodings(start: int, rows: np.ndarray) -> list[bytes]:
    """What the decoder stores for these rows (``json_format``), row by row: the reference."""
    template = CSV_LAYOUT.json_format()
    return [template % (start + n, *row) for n, row in enumerate(rows.tolist())]


def test_rendered_rows_are_the_decoders_tuples() -> None:
    rng = random.Random(3)
    for count in (1, 2, 17, 300, 511, 512, 513, 2000):
        rows = random_rows(rng, count)
        start = rng.choice([0, 7, 2**40])
        assert render_values(CSV_LAYOUT, start, rows) == encodings(start, rows)
    assert render_values(CSV_LAYOUT, 5, np.empty((0, WIDTH), dtype=np.int64)) == []


@pytest.mark.parametrize("seed", range(12))
def test_a_column_ring_reads_like_a_ring_of_bytes(seed: int) -> None:
    """Random appends, reads (oldest, latest, at), growth, budget drops, truncations and resets against a plain ring
    holding the same encodings; a hot part smaller than the reads makes them render old rows."""
    rng = random.Random(seed)
    capacity = rng.randint(1, 40)
    columns = IntColumnRing(capacity, CSV_LAYOUT, hot=rng.randint(1, 6))
    plain: RingBuffer[bytes] = RingBuffer(capacity)
    for step in range(300):
        action = rng.random()
        if action < 0.4:  # values within 32 bits (but ts) at first, then now and then wider ones
            rows = random_rows(rng, rng.choice([0, 1, 2, 5, capacity + 3]), wide=0.0 if step < 150 else 0.01)
            encoded = encodings(plain.next_index, rows)
            columns.extend_rows(rows, encoded)
            plain.extend(encoded)
        elif action < 0.8:
            after = rng.randint(-2, plain.next_index + 1)
            limit = rng.choice([None, 1, 3, 100])
            kind = rng.choice(["oldest", "latest"])
            assert columns.read(after, **{kind: limit}) == plain.read(after, **{kind: limit})
            index = rng.randint(-1, plain.next_index)
            assert columns.at(index) == plain.at(index)
        elif action < 0.88:
            capacity = rng.randint(max(1, len(plain)), 2 * capacity + 2)
            columns.resize(capacity)
            plain.resize(capacity)
        elif action < 0.93:
            index = rng.randint(plain.next_index - capacity, plain.next_index)
            columns.drop_before(index)
            plain.drop_before(index)
        elif action < 0.96:
            index = rng.randint(max(-1, plain.next_index - len(plain) - 1), plain.next_index)  # as a rewind does
            columns.truncate_after(index)
            plain.truncate_after(index)
        else:
            start = rng.randint(0, 50)
            columns.reset(start)
            plain.reset(start)
        assert (columns.first, columns.last, len(columns)) == (plain.first, plain.last, len(plain))
    assert columns.read(-1) == plain.read(-1)


def test_rows_within_32_bits_take_4_bytes_a_value_until_one_does_not() -> None:
    ring = IntColumnRing(10, CSV_LAYOUT, hot=1)
    rows = random_rows(random.Random(4), 6, wide=0.0)
    rows[:, CSV_LAYOUT.ts_column] = [10**16 + n for n in range(6)]  # ts in picoseconds: always 64 bits
    ring.extend_rows(rows, encodings(0, rows))
    assert ring.row_bytes == 8 + 4 * (WIDTH - 1)
    wide = rows[:2].copy()
    wide[1, 5] = 2**31
    ring.extend_rows(wide, encodings(6, wide))
    assert ring.row_bytes == 8 * WIDTH
    assert ring.read(-1).items == encodings(0, rows) + encodings(6, wide)


def test_a_column_ring_takes_no_bare_bytes_and_no_holes() -> None:
    ring = IntColumnRing(8, CSV_LAYOUT)
    with pytest.raises(TypeError):
        ring.append(b"{}")
    with pytest.raises(TypeError):
        ring.extend([b"{}"])
    with pytest.raises(ValueError, match="rows of 13 values"):
        ring.extend_rows(np.zeros((2, 3), dtype=np.int64), [b"", b""])
    rows = random_rows(random.Random(1), 3)
    ring.extend_rows(rows, encodings(0, rows))
    assert np.array_equal(ring.rows(1, 3), rows[1:])
    with pytest.raises(IndexError):
        ring.rows(2, 4)


def test_the_byte_budget_counts_a_rows_memory() -> None:
    stream = ColumnOutputStream("S", CSV_LAYOUT, capacity=100, byte_budget=10 * WIDTH * 8)
    rows = random_rows(random.Random(2), 25)
    stream.extend_rows(rows, encodings(0, rows))
    assert stream.held_bytes == 10 * WIDTH * 8 and len(stream.buffer) == 10
    assert stream.dropped_for_bytes == 15
    page = stream.buffer.read(-1)
    assert page.missed == 15 and page.items == encodings(0, rows)[15:]


def test_arrow_pages_made_from_rows_are_those_of_the_json_pages() -> None:
    """Byte for byte what encode_page makes of the JSON page: empty pages, overwritten tuples (missed), oldest and
    latest; a page beyond 1 MiB is cut at its own size, so one of the two is the start of the other."""
    stream = ColumnOutputStream("SENSOR4", CSV_LAYOUT, capacity=50)
    rows = random_rows(random.Random(6), 80, wide=0.0)
    stream.extend_rows(rows, encodings(0, rows))
    for after in (-5, -1, 10, 29, 30, 60, 78, 79, 90):
        for oldest, latest in ((None, None), (1, None), (7, None), (None, 1), (None, 12)):
            json_page = orjson.loads(stream.render(after, oldest=oldest, latest=latest))
            arrow = stream.arrow_page(after, oldest=oldest, latest=latest)
            assert arrow == arrow_pages.encode_page(json_page), (after, oldest, latest)
            assert arrow_pages.decode_page(arrow) == json_page
    big = ColumnOutputStream("SENSOR4", CSV_LAYOUT, capacity=30_000)
    rows = random_rows(random.Random(7), 20_000, wide=0.0)
    big.extend_rows(rows, encodings(0, rows))
    arrow_tuples = arrow_pages.decode_page(big.arrow_page(-1, oldest=None, latest=None))["tuples"]
    json_tuples = orjson.loads(big.render(-1, oldest=None, latest=None))["tuples"]
    assert len(arrow_tuples) == big.arrow_page_rows < 20_000
    shorter = min(len(arrow_tuples), len(json_tuples))
    assert arrow_tuples[:shorter] == json_tuples[:shorter] and shorter > 1000


def spec_of(params: dict[str, object]) -> WorkerSpec:
    params = {"ingest_port": 1, "inter_pan_inputs": ["SENSOR4", "EVENTS"], "decoder": "debs_csv", **params}
    return WorkerSpec("F", "forwarder", HOST, 0, "p", params={k: v for k, v in params.items() if v is not None})


def test_streams_the_decoder_reads_as_csv_hold_columns_unless_turned_off() -> None:
    def output(params: dict[str, object], name: str) -> OutputStream:
        return Forwarder.make_output(spec_of(params), name, EMPTY)

    assert type(output({}, "SENSOR4")) is ColumnOutputStream
    assert type(output({}, "EVENTS")) is OutputStream  # JSON rows of any shape
    assert type(output({"column_buffers": False}, "SENSOR4")) is OutputStream
    assert type(output({"decoder": None}, "SENSOR4")) is OutputStream
    problems = Forwarder.check_params(spec_of({"column_buffers": "yes"}))
    assert problems == ["column_buffers: must be true or false, got 'yes'"]


async def test_a_forwarder_serves_the_same_pages_from_columns_as_from_json_tuples(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    """Fuzzed input (bad lines, JSON rows, promises) into two forwarders, columns and JSON tuples: every /data
    page they answer (JSON, line and Arrow pages, oldest and latest, old rows rendered again) is the same: the
    Arrow pages of columns are made from the rows, those of JSON tuples from the JSON page."""
    lines = fuzzed_input(5, 3000).split(b"\n")
    data = b"\n".join(line for line in lines if b'"promise"' not in line) + b"\n"
    specs = [
        forwarder(name, sorted(EXPECTED), params={"max_row_bytes": MAX_ROW, "column_buffers": name == "C"},
                  buffer_size=2000)
        for name in ("C", "J")
    ]
    started = [(await workers.start(make_workflow(repository.port, [spec])))[0] for spec in specs]
    assert {type(w.outputs["SENSOR4"]) for w in started} == {ColumnOutputStream, OutputStream}
    for spec in specs:
        await send_lines(HOST, spec["params"]["ingest_port"], [data])
    for worker in started:
        await wait_until(lambda w=worker: w.component.counters()["connections"] == 1
                         and w.component.counters()["open_connections"] == 0, timeout_s=30)
    columns, plain = started
    assert columns.component.counters()["rows"] == plain.component.counters()["rows"] > 1000
    rng = random.Random(8)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        for stream in sorted(EXPECTED):
            last = plain.outputs[stream].buffer.last
            for _ in range(6):
                params = {"s": stream, "i": str(rng.randint(-1, last)), "n": str(rng.choice([1, 50, 5000]))}
                if rng.random() < 0.3:
                    params = {"s": stream, "l": str(rng.choice([1, 300]))}
                accept = rng.choice(["application/json", "application/x-ndjson", arrow_pages.ARROW_TYPE])
                answers = []
                for worker in started:
                    url = f"http://{worker.endpoint}/data"
                    async with session.get(url, params=params, headers={"Accept": accept}) as response:
                        assert response.status == 200
                        assert response.content_type == accept
                        answers.append((await response.read()).replace(worker.epoch.encode(), b"EPOCH"))
                assert answers[0] == answers[1], (stream, params, accept)
    counters = columns.outputs["SENSOR4"].counters()  # old tuples were read: rendered again from their rows
    assert counters["rendered_again"] > 0 and counters["row_bytes"] in (8 + 4 * (WIDTH - 1), 8 * WIDTH)


async def read_all(repository: RepositoryServer, stream: str, source: Worker, other: Worker, **options: Any) -> Any:
    """Every tuple of ``stream`` from ``source`` (the other publisher excluded), and the subscriber's stats."""
    batches = []
    async with StreamSubscriber(stream, (HOST, repository.port), start="earliest", page_size=700,
                                exclude=(other.endpoint,), **options) as subscriber:
        async with asyncio.timeout(60):
            async for batch in subscriber.batches():
                batches.append(batch)
                if subscriber.position >= source.outputs[stream].buffer.last:
                    break
        assert subscriber.source is not None and subscriber.source.endpoint == source.endpoint
        return batches, subscriber.stats


async def test_a_subscriber_of_columns_reads_what_a_json_subscriber_reads(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    """From column buffers (Arrow pages made from rows) and from a JSON-only publisher (its JSON pages turned into
    columns): the same tuples, in record batches, and the same count of missed tuples."""
    lines = fuzzed_input(9, 6000).split(b"\n")
    data = b"\n".join(line for line in lines if b'"promise"' not in line) + b"\n"
    specs = [forwarder(name, sorted(EXPECTED), params={"max_row_bytes": MAX_ROW, "column_buffers": name == "C"},
                       buffer_size=500) for name in ("C", "J")]
    columns, plain = [(await workers.start(make_workflow(repository.port, [spec])))[0] for spec in specs]
    plain.api.arrow = False  # an older peer: it answers JSON whatever the reader asks for
    for spec, worker in zip(specs, (columns, plain), strict=True):
        await send_lines(HOST, spec["params"]["ingest_port"], [data])
        await wait_until(lambda w=worker: w.component.counters()["open_connections"] == 0
                         and w.component.counters()["connections"] == 1, timeout_s=30)
    for stream, overwritten in (("SENSOR4", True), ("EVENTS", False)):  # CSV rows, and JSON rows of any shape
        reference, reference_stats = await read_all(repository, stream, plain, columns)
        expected = [item for batch in reference for item in batch]
        assert len(expected) > 10 and (reference_stats.missed > 0) is overwritten  # a ring of 500
        for source, other in ((columns, plain), (plain, columns)):
            batches, stats = await read_all(repository, stream, source, other, columns=True)
            assert all(isinstance(batch, pa.RecordBatch) and batch.num_rows for batch in batches)
            assert [row for batch in batches for row in batch.to_pylist()] == expected, (stream, source.spec.name)
            assert stats.missed == reference_stats.missed and stats.decode_errors == 0


def test_a_subscriber_of_columns_takes_no_markers_and_no_bytes() -> None:
    with pytest.raises(ValueError, match="no markers"):
        StreamSubscriber("S", (HOST, 1), columns=True, gaps=True)
    with pytest.raises(ValueError, match="not both"):
        StreamSubscriber("S", (HOST, 1), columns=True, encoded=True)


def test_column_pages_with_falling_or_missing_indices_are_refused() -> None:
    header = b'{"status":"ok","stream":"S","first":0,"last":3,"missed":0,"meta":{}}'
    good = arrow_pages.encode_int_columns(header, ["i", "x"], [np.array([1, 2]), np.array([5, 6])])
    assert arrow_pages.decode_columns(good)["indices"] == [1, 2]
    falling = arrow_pages.encode_int_columns(header, ["i", "x"], [np.array([2, 2]), np.array([5, 6])])
    with pytest.raises(arrow_pages.PageFormatError, match="do not rise"):
        arrow_pages.decode_columns(falling)
    unindexed = arrow_pages.encode_int_columns(header, ["x"], [np.array([5, 6])])
    with pytest.raises(arrow_pages.PageFormatError, match="no integer index"):
        arrow_pages.decode_columns(unindexed)


class _Printed(Exception):
    """Ends the README's endless read loop at its first print."""


async def test_the_readme_example_of_a_column_reader_runs_as_written(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    readme = (Path(__file__).parents[3] / "README.md").read_text()
    (example,) = [block for block in readme.split("```python\n")[1:] if "columns=True" in block.split("```")[0]]
    code = example.split("```")[0].replace('"127.0.0.1:8080"', f'"{HOST}:{repository.port}"')
    spec = forwarder("F", ["SENSOR4"], buffer_size=1000)
    (worker,) = await workers.start(make_workflow(repository.port, [spec]))
    rows = random_rows(random.Random(11), 300, wide=0.0)
    worker.outputs["SENSOR4"].extend_rows(rows, encodings(0, rows))
    printed: list[tuple[Any, ...]] = []

    def capture(*values: Any) -> None:
        printed.append(values)
        raise _Printed

    body = "async def example():\n" + "".join(f"    {line}\n" for line in code.splitlines())
    namespace: dict[str, Any] = {"StreamSubscriber": StreamSubscriber, "print": capture}
    exec(compile(body, "README.md", "exec"), namespace)
    with pytest.raises(_Printed):
        async with asyncio.timeout(60):
            await namespace["example"]()
    ((last, mean),) = printed
    assert last.as_py() == 299 and mean.as_py() == pytest.approx(float(rows[:, 5].mean()))


async def test_a_large_batch_is_stored_whole_though_only_its_newest_rows_are_rendered(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    """A forwarder renders the JSON of a column buffer's newest tuples only; every tuple reads the same, as a
    parsed block or as rows from the per-line path, and the kept JSON is that of the right indices."""
    spec = forwarder("F", ["SENSOR4"], buffer_size=5000)
    (worker,) = await workers.start(make_workflow(repository.port, [spec]))
    stream = worker.outputs["SENSOR4"]
    assert type(stream) is ColumnOutputStream and stream.hot_rows < 1000
    rows = random_rows(random.Random(12), 1000, wide=0.0)
    rows[:, 0], rows[:, CSV_LAYOUT.ts_column] = 4, 10**15 + np.arange(1000)  # as the decoder takes them
    block = parse_block(b"".join(b",".join(b"%d" % v for v in row) + b"\n" for row in rows.tolist()), CSV_LAYOUT,
                        MAX_ROW)
    assert len(block.taken) == 1000
    worker.component._deliver({"SENSOR4": RowBlock(block, np.arange(1000), CSV_LAYOUT)})
    worker.component._deliver({"SENSOR4": rows.tolist()})
    expected = encodings(0, np.concatenate([rows, rows]))
    assert stream.buffer.read(-1, oldest=5000).items == expected
    assert stream.buffer.hot_items(0, 2000) == expected[-stream.hot_rows :]


async def test_a_reader_a_few_seconds_behind_reads_the_ingests_bytes_without_rendering_again(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    """A column buffer keeps the JSON of a sixteenth of its rows (256 to 8,192): a reader several thousand
    tuples behind (an unpaced replay's recorder, seconds of a 2 kHz ball) reads the bytes the ingest rendered
    and makes the stream render none of them again; a reader behind that still gets every tuple the same."""
    assert [hot_rows_for(capacity) for capacity in (100, 5000, 10_000, 100_000, 400_000)] == [100, 312, 625, 6250,
                                                                                               8192]
    spec = forwarder("F", ["SENSOR4"], buffer_size=100_000)
    (worker,) = await workers.start(make_workflow(repository.port, [spec]))
    stream = worker.outputs["SENSOR4"]
    assert type(stream) is ColumnOutputStream and stream.hot_rows == 6250
    rows = random_rows(random.Random(13), 9000, wide=0.0)
    rows[:, 0], rows[:, CSV_LAYOUT.ts_column] = 4, 10**15 + np.arange(9000)  # as the decoder takes them
    for at in range(0, 9000, 400):  # 200 ms of a ball per block, as the unpaced feed sends them
        piece = rows[at : at + 400]
        block = parse_block(b"".join(b",".join(b"%d" % v for v in row) + b"\n" for row in piece.tolist()),
                            CSV_LAYOUT, MAX_ROW)
        worker.component._deliver({"SENSOR4": RowBlock(block, np.arange(len(piece)), CSV_LAYOUT)})
    expected = encodings(0, rows)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:

        async def read_from(after: int) -> list[bytes]:
            """Every tuple after ``after``, page by page (a page holds at most a megabyte)."""
            tuples: list[bytes] = []
            while after < 8999:
                params = {"s": "SENSOR4", "i": str(after), "n": "9000"}
                async with session.get(f"http://{worker.endpoint}/data", params=params,
                                       headers={"Accept": line_pages.ACCEPT}) as response:
                    assert response.status == 200
                    page = line_pages.decode(await response.read())[0]
                tuples += page["tuples"]
                after = page["indices"][-1]
            return tuples

        assert await read_from(9000 - 6250 - 1) == expected[-6250:]  # the newest 6,250: 3 s of a 2 kHz ball
        assert stream.counters()["rendered_again"] == 0
        assert await read_from(-1) == expected  # from the start: the oldest 2,750 are rendered again
        assert stream.counters()["rendered_again"] == 2750


async def test_arrow_is_answered_only_for_a_page_of_at_least_a_tuples(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    """``/data?a=N`` with an Accept that prefers Arrow: Arrow for a page of N tuples or more, JSON below (the
    same page), also in process; a bad ``a`` is a clear 400."""
    spec = forwarder("C", ["SENSOR4"], buffer_size=2000)
    [worker] = await workers.start(make_workflow(repository.port, [spec]))
    rows = random_rows(random.Random(4), 600, wide=0)
    rows[:, 0], rows[:, 1] = 4, np.arange(600) * 10**9
    await send_lines(HOST, spec["params"]["ingest_port"], [b",".join(b"%d" % v for v in row) for row in rows.tolist()])
    await wait_until(lambda: worker.outputs["SENSOR4"].buffer.last == 599, timeout_s=30)
    accept = {"Accept": ACCEPT["arrow"]}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        url = f"http://{worker.endpoint}/data"
        for after, n, arrow in ((590, 300, False), (100, 300, True), (-1, 100, False), (298, 301, True)):
            params = {"s": "SENSOR4", "i": str(after), "n": str(n), "a": "300"}
            async with session.get(url, params=params, headers=accept) as response:
                body = await response.read()
                assert response.status == 200 and (response.content_type == arrow_pages.ARROW_TYPE) is arrow
            local = await worker.api.serve_data(DataQuery("SENSOR4", after, n, None, 0, False, None, None, 300),
                                                "arrow")
            assert local == body  # in process: the same answer
            page = arrow_pages.decode_page(body) if arrow else orjson.loads(body)
            assert [t["i"] for t in page["tuples"]] == list(range(after + 1, min(after + 1 + n, 600)))
        async with session.get(url, params={"s": "SENSOR4", "a": "0"}, headers=accept) as response:
            assert response.status == 400 and "'a'" in (await response.text())


async def test_a_reader_in_process_gets_the_rows_themselves_as_the_json_page_has_them(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    """``form="rows"`` in process (``ColumnOutputStream.row_page``): the page `/data` answers in JSON, with its
    tuples as the rows (a ``RowTable``) and their indices beside them: the same tuples, indices, ``missed``,
    ``first``, ``last`` and meta, also past overwritten rows, at the int64 extremes and for an empty read."""
    spec = forwarder("C", ["SENSOR4"], buffer_size=2000)
    [worker] = await workers.start(make_workflow(repository.port, [spec]))
    rows = random_rows(random.Random(5), 2600, wide=0.2)
    rows[:, 0], rows[:, CSV_LAYOUT.ts_column] = 4, np.arange(2600) * 10**9
    await send_lines(HOST, spec["params"]["ingest_port"], [b",".join(b"%d" % v for v in row) for row in rows.tolist()])
    await wait_until(lambda: worker.outputs["SENSOR4"].buffer.last == 2599, timeout_s=30)
    missed = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        for after, n in ((100, 50), (700, 300), (2590, 300), (2599, 10), (-1, 5000)):
            async with session.get(f"http://{worker.endpoint}/data",
                                   params={"s": "SENSOR4", "i": str(after), "n": str(n)}) as response:
                expected = orjson.loads(await response.read())
            page = await worker.api.serve_local(DataQuery("SENSOR4", after, n, None, 0, False, None, None), "rows")
            assert type(page) is dict
            tuples, indices = page.pop("tuples"), page.pop("indices")
            assert [t["i"] for t in expected["tuples"]] == indices
            if indices:
                assert type(tuples) is RowTable and tuples.table.dtype == np.int64
                assert tuples.tuples() == expected.pop("tuples")
            else:
                assert tuples == [] == expected.pop("tuples")
            assert page == expected
            missed.append(page["missed"])
    assert missed == [499, 0, 0, 0, 600] and page["first"] == 600
