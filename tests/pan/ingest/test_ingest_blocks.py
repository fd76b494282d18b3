"""Ingest's block path (pan/wire/int_csv.py) against the per-line path: same rows, stored bytes and counters.

Both paths read the same bytes, cut into the same reads, through the server's
own read loop; the per-line path (``parse_blocks: false``) is the reference.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from pan.ingest.decoders import encode_batches, encode_rows
from pan.ingest.lines import END_OF_STREAM
from pan.ingest.schema import INT64_MAX, INT64_MIN, TS_LIMIT
from pan.ingest.server import IngestServer, send_lines
from pan.ingest.settings import BLOCK_MIN_LINES, IngestSettings, parse_ingest_params
from pan.ingest.streams import Connection
from pan.repository.server import RepositoryServer
from pan.wire.int_csv import FORMAT_MAX_ROWS, RowBlock, parse_block, render
from simulator.debs_rows import CSV_LAYOUT, SENSOR_FIELDS, DebsCsvDecoder
from simulator.match import generate
from tests.conftest import HOST, WorkerGroup, forwarder, make_workflow, wait_until

SENSORS = (4, 8, 10, 47, 105)
EXPECTED = {f"SENSOR{sid}" for sid in SENSORS} | {"EVENTS"}
MAX_ROW = 256


class ChunkReader:
    """Hands the server's read loop the given reads one by one, as a socket would, then EOF."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = list(reversed(chunks))

    async def read(self, _limit: int) -> bytes:
        return self.chunks.pop() if self.chunks else b""


@dataclass
class Run:
    """What one server did with the input: deliveries, stored tuples, promises, counters."""

    delivered: list[tuple[str, list[Any]]] = field(default_factory=list)
    stored: dict[str, list[bytes]] = field(default_factory=dict)
    promises: list[dict[str, int]] = field(default_factory=list)
    blocks: int = 0  # deliveries that came as a parsed block
    counters: dict[str, Any] = field(default_factory=dict)
    streams: dict[str, tuple[Any, ...]] = field(default_factory=dict)


async def ingest(chunks: list[bytes], *, parse_blocks: bool, expected: set[str] = EXPECTED,
                 block_min_lines: int = 1) -> Run:
    """``block_min_lines`` 1: every read with a complete line goes the block path (the default sends small
    reads line by line)."""
    run = Run()
    settings = IngestSettings(max_row_bytes=MAX_ROW, decoder=DebsCsvDecoder, parse_blocks=parse_blocks,
                              block_min_lines=block_min_lines)

    def deliver(batches: dict[str, Any]) -> None:  # as the forwarder does
        starts = {stream: len(run.stored.get(stream, [])) for stream in batches}
        encoded = encode_batches(batches, starts, server.row_format)
        for stream, rows in batches.items():
            run.blocks += type(rows) is RowBlock
            run.delivered.append((stream, list(rows)))
            assert encode_rows(server.row_format(stream), starts[stream], rows) == encoded[stream]
            run.stored.setdefault(stream, []).extend(encoded[stream])

    server = IngestServer(HOST, 0, expected, deliver, run.promises.append, settings)
    await server._consume(ChunkReader(chunks), Connection("sender"))  # type: ignore[arg-type]
    run.counters = server.counters.as_dict()
    run.streams = {name: (s.newest, s.promised, s.ended) for name, s in server.streams.items()}
    return run


async def assert_same(chunks: list[bytes], expected: set[str] = EXPECTED) -> Run:
    reference = await ingest(chunks, parse_blocks=False, expected=expected)
    block = await ingest(chunks, parse_blocks=True, expected=expected)
    assert reference.blocks == 0
    assert block.delivered == reference.delivered
    assert block.stored == reference.stored
    assert block.promises == reference.promises
    assert block.counters == reference.counters
    assert block.streams == reference.streams
    return block


def cut(data: bytes, rng: random.Random, largest: int) -> list[bytes]:
    """``data`` as reads of random sizes: lines are split across reads as TCP splits them."""
    chunks, at = [], 0
    while at < len(data):
        size = rng.randint(1, largest)
        chunks.append(data[at : at + size])
        at += size
    return chunks


# --- a generated match ---------------------------------------------------------------


@pytest.fixture(scope="module")
def match_rows(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    folder: Path = tmp_path_factory.mktemp("ingest-match")
    generate(folder, 0.05, 7, workers=1)
    return (folder / "full-game").read_bytes()


def match_streams(rows: bytes) -> set[str]:
    return {f"SENSOR{sid}" for sid in {int(line.split(b",", 1)[0]) for line in rows.splitlines()}}


async def test_a_generated_match_is_ingested_identically_by_both_paths(match_rows: bytes) -> None:
    streams = match_streams(match_rows)
    rng = random.Random(13)
    run = await assert_same(cut(match_rows, rng, 256 * 1024), streams)
    assert run.counters["rows"] == match_rows.count(b"\n") > 10_000
    assert run.blocks > 0  # the block path did the work
    assert sum(run.counters["rejected"].values()) + run.counters["malformed"] + run.counters["unexpected"] == 0


async def test_a_match_missing_some_expected_sensors_counts_them_unexpected_alike(match_rows: bytes) -> None:
    streams = sorted(match_streams(match_rows))
    run = await assert_same(cut(match_rows, random.Random(5), 64 * 1024), set(streams[::2]))
    assert run.counters["unexpected"] > 0 and run.blocks > 0


def test_the_block_parser_reads_a_match_as_the_decoder_does(match_rows: bytes) -> None:
    block = parse_block(match_rows, CSV_LAYOUT, MAX_ROW)
    lines = match_rows.splitlines()
    assert len(block.taken) == len(lines)
    assert block.values.tolist() == [list(map(int, line.split(b","))) for line in lines]
    rows = RowBlock(block, np.arange(len(lines)), CSV_LAYOUT)
    decoder = DebsCsvDecoder(match_streams(match_rows), None)  # type: ignore[arg-type]
    start = 987_654
    assert rows.encode(start) == [decoder.encode(start + n, row) for n, row in enumerate(rows)]


@pytest.mark.parametrize("count", [1, 7, FORMAT_MAX_ROWS, FORMAT_MAX_ROWS + 1, 2_000])
def test_both_renderers_write_the_decoders_tuples_for_any_picks(match_rows: bytes, count: int) -> None:
    """A few rows go through one %-format, many through a numpy gather: both write what the decoder does,
    for every row of a read in order, a subset, rows out of order, and a read with lines the parser left."""
    rng = random.Random(count)
    lines = match_rows.splitlines(keepends=True)[: count + 40]
    lines.insert(rng.randrange(len(lines)), b"007,1,2,3,4,5,6,7,8,9,10,11,12\n")  # not canonical: not taken
    block = parse_block(b"".join(lines), CSV_LAYOUT, MAX_ROW)
    decoder = DebsCsvDecoder(match_streams(match_rows), None)  # type: ignore[arg-type]
    every = np.arange(len(block.values))
    for picks in (every[:count], np.sort(rng.sample(range(len(every)), count)), every[:count][::-1]):
        picks = np.asarray(picks)
        index = np.arange(10**9, 10**9 + count) * rng.choice([1, 3])
        expected = [decoder.encode(i, row) for i, row in zip(index.tolist(), block.values[picks].tolist(),
                                                                strict=True)]
        assert render(block, CSV_LAYOUT, picks, index) == expected
    whole = parse_block(b"".join(match_rows.splitlines(keepends=True)[:count]), CSV_LAYOUT, MAX_ROW)  # all taken
    index = np.arange(count)
    assert render(whole, CSV_LAYOUT, np.arange(count), index) == [
        decoder.encode(i, row) for i, row in enumerate(whole.values.tolist())]


# --- fuzzed input ----------------------------------------------------------------------


def good_row(rng: random.Random, sid: int | None = None) -> list[int]:
    def value() -> int:
        return rng.choice([0, 1, -1, rng.randint(-99_999, 99_999), rng.randint(-(10**18) + 1, 10**18 - 1)])

    values = [value() for _ in SENSOR_FIELDS]
    values[0] = rng.choice(SENSORS) if sid is None else sid
    values[1] = rng.randint(0, 10**16)
    return values


def csv(values: list[Any]) -> bytes:
    return ",".join(map(str, values)).encode()


def bad_line(rng: random.Random, newest_ts: int) -> bytes:
    """One line of a randomly chosen kind that the per-line path refuses or treats specially."""
    row = good_row(rng)
    at = rng.randrange(len(row))
    kind = rng.randrange(25)
    if kind == 0:
        return csv(row[: rng.randint(1, len(row) - 1)])  # too few fields
    if kind == 1:
        return csv([*row, rng.randint(0, 9)])  # too many
    if kind == 2:
        row[at] = rng.choice(["1.5", "abc", " 5", "+5", "1_000", "", "-", "1-2", "--1", "5-", "0x1", "٣"])
        return csv(row)
    if kind == 3:
        row[at] = rng.choice([INT64_MAX + 1, INT64_MIN - 1, 10**25, -(10**30)])  # beyond int64
        return csv(row)
    if kind == 4:
        row[at] = rng.choice([INT64_MAX, INT64_MIN, 10**18, -(10**18)])  # 19 digits, still int64
        return csv(row)
    if kind == 5:
        text = [str(v) for v in row]
        text[at] = rng.choice(["007", "-0", "00", "-007", "0" * 30 + "1"])  # valid, not canonical
        return ",".join(text).encode()
    if kind == 6:
        row[1] = rng.choice([-1, -(10**12), TS_LIMIT, TS_LIMIT + 5])  # ts out of range
        return csv(row)
    if kind == 7:
        return csv(row) + b"," + b"9" * MAX_ROW  # over max_row_bytes
    if kind == 8:
        return rng.choice([b"", b"\r", b"  "])
    if kind == 9:
        return csv(row) + b"\r"
    if kind == 10:
        return orjson.dumps({"stream": f"SENSOR{row[0]}", **dict(zip(SENSOR_FIELDS, row, strict=True))})
    if kind == 11:
        return orjson.dumps({"stream": f"SENSOR{row[0]}", "ts": row[1], "x": 1})  # missing fields
    if kind == 12:
        return orjson.dumps({"stream": "EVENTS", "ts": rng.randint(0, 10**16), "note": "n"})
    if kind == 13:
        return orjson.dumps({"stream": f"SENSOR{row[0]}", "ts": newest_ts + rng.randint(0, 10**13), "promise": True})
    if kind == 14:
        return orjson.dumps({"stream": "EVENTS", "ts": rng.choice([1.5, -3, END_OF_STREAM]), "promise": True})
    if kind == 15:
        row[0] = rng.choice([3, 99, -4, 0])  # a sensor nobody expects
        return csv(row)
    if kind == 16:
        return b"{not json"
    if kind == 17:
        return csv(row).replace(b",", b";")
    if kind == 18:
        return b"," * (len(SENSOR_FIELDS) - 1)  # the right comma count, no digits
    if kind == 19:
        return csv(row).replace(b",", b",-", 1)  # "-" in front of a minus field: "--5"
    if kind == 20:
        return b"x" * (70 * 1024)  # beyond MAX_LINE_BYTES: skipped while reading
    if kind == 21:
        return orjson.dumps({"stream": f"SENSOR{row[0]}", **dict(zip(SENSOR_FIELDS, row, strict=True)), "sid": 3})
    if kind == 22:
        return csv(row).replace(b",", b",,", 1)  # an empty field, and one field too many
    if kind == 23:
        split_at = rng.randrange(1, len(row))  # two short lines with as many fields as one row between them
        return csv(row[:split_at]) + b"\n" + csv(row[split_at:])
    return csv(row)[:-1] + b"\xff"


def fuzzed_input(seed: int, lines: int) -> bytes:
    rng = random.Random(seed)
    out, newest = [], 0
    bad_share = rng.choice([0.02, 0.2, 0.6])
    for _ in range(lines):
        if rng.random() < bad_share:
            out.append(bad_line(rng, newest))
        else:
            row = good_row(rng)
            newest = max(newest, row[1])
            out.append(csv(row))
    return b"\n".join(out) + rng.choice([b"\n", b"", b"\n4,5"])


@pytest.mark.parametrize("seed", range(12))
async def test_fuzzed_input_is_ingested_identically_by_both_paths(seed: int) -> None:
    data = fuzzed_input(seed, 3000)
    rng = random.Random(seed)
    run = await assert_same(cut(data, rng, rng.choice([200, 4096, 256 * 1024])))
    assert run.counters["rows"] > 0


async def test_every_kind_of_bad_line_is_refused_alike_on_its_own() -> None:
    rng = random.Random(99)
    for _ in range(400):
        line = bad_line(rng, 10**15)
        good = [csv(good_row(rng, sid)) for sid in SENSORS]
        await assert_same([b"\n".join([good[0], line, *good[1:]]) + b"\n"])


async def test_two_short_lines_are_not_taken_for_one_row() -> None:
    row = [4, 10**15, *range(11)]
    for split_at in range(1, len(row)):
        lines = [csv(row), csv(row[:split_at]), csv(row[split_at:]), csv(row)]
        run = await assert_same([b"\n".join(lines) + b"\n"])
        assert run.counters["malformed"] == 2 and run.counters["rows"] == 2


async def test_small_reads_go_line_by_line_and_large_ones_as_blocks_with_the_same_result(match_rows: bytes) -> None:
    lines = match_rows.splitlines(keepends=True)[:2000]
    streams = match_streams(b"".join(lines))
    reference = await ingest([b"".join(lines)], parse_blocks=False, expected=streams)
    for size, blocks in ((10, False), (BLOCK_MIN_LINES - 1, False), (BLOCK_MIN_LINES, True), (500, True)):
        reads = [b"".join(lines[at : at + size]) for at in range(0, len(lines), size)]
        run = await ingest(reads, parse_blocks=True, expected=streams, block_min_lines=BLOCK_MIN_LINES)
        assert (run.blocks > 0) is blocks, size
        assert run.stored == reference.stored and run.counters == reference.counters


def test_the_switch_is_a_forwarder_param() -> None:
    settings, problems = parse_ingest_params({"parse_blocks": False}, [])
    assert problems == [] and settings.parse_blocks is False
    assert parse_ingest_params({}, [])[0].parse_blocks is True
    assert parse_ingest_params({"parse_blocks": "no"}, [])[1] == ["parse_blocks: must be true or false, got 'no'"]


# --- over TCP ------------------------------------------------------------------------------


async def test_a_forwarder_on_the_block_path_stores_what_the_per_line_path_would_over_tcp(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    # Without promises, what is stored does not depend on where TCP cuts the reads (a promise is checked
    # against the rows of its own read).
    lines = fuzzed_input(3, 2000).split(b"\n")
    data = b"\n".join(line for line in lines if b'"promise"' not in line) + b"\n"
    reference = await ingest([data], parse_blocks=False)
    spec = forwarder("F", sorted(EXPECTED), params={"max_row_bytes": MAX_ROW}, buffer_size=50_000)
    (worker,) = await workers.start(make_workflow(repository.port, [spec]))
    assert worker.component.ingest.block_layout is CSV_LAYOUT  # on by default
    await send_lines(HOST, spec["params"]["ingest_port"], [data])
    await wait_until(lambda: worker.component.counters()["connections"] == 1
                     and worker.component.counters()["open_connections"] == 0, timeout_s=30)
    counters = worker.component.counters()
    for key, value in reference.counters.items():
        if key not in ("connections",):
            assert counters[key] == value, key
    assert counters["rows"] > 0 and counters["rejected"] and counters["malformed"]
    for stream in sorted(EXPECTED):
        held = worker.outputs[stream].buffer.read(-1, oldest=100_000).items
        assert held == reference.stored.get(stream, [])
