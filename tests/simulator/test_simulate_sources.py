"""The simulator's row sources: finding the rows around a bound by bisection, and handing out rows up to a limit."""

from __future__ import annotations

import random
from pathlib import Path

from simulator.debs import HALF1, HALF2
from simulator.sources import halftime_break, rows_around
from tests.simulator.split_folders import rate_rows, write_split


def test_rows_around_finds_the_neighbours_of_a_bound_by_bisection(tmp_path: Path) -> None:
    stamps = rate_rows(HALF1[0], 2.0, 200) + rate_rows(HALF2[0], 2.0, 200)
    data = write_split(tmp_path / "split", {13: stamps})
    path = data / "SENSOR13.csv"
    for bound in (stamps[0] - 1, stamps[0], stamps[150], stamps[399], stamps[400] - 1, stamps[-1], stamps[-1] + 1):
        before = max((t for t in stamps if t <= bound), default=None)
        after = min((t for t in stamps if t > bound), default=None)
        for scan in (1, 100, 1 << 16):
            assert rows_around(path, bound, scan) == (before, after), (bound, scan)
    assert halftime_break({"SENSOR13": path}, HALF1[1], HALF2[0]) == (stamps[399], stamps[400])


def test_row_source_takes_every_row_up_to_the_limit_in_file_order() -> None:
    """``RowSource.take`` hands out exactly the rows with ts <= limit, at most ``max_rows`` at a time, across
    block boundaries and runs of equal ts, in file order: nothing skipped, nothing twice."""
    from simulator.sources import RowSource

    rnd = random.Random(7)
    ts, t = [], 0
    for _ in range(3000):
        t += rnd.choice((0, 0, 1, 5, 40))  # runs of equal ts, small and large steps
        ts.append(t)
    lines = [b"4,%d,%d\n" % (t, k) for k, t in enumerate(ts)]
    sizes = [rnd.randint(1, 300) for _ in range(40)]
    blocks, at = [], 0
    for size in sizes:
        if at < len(lines):
            blocks.append(lines[at : at + size])
            at += size
    blocks.append(lines[at:])
    source = RowSource("SENSOR4", iter([b"".join(b) for b in blocks if b]))
    taken: list[bytes] = []
    limit = 0
    while not source.exhausted or source.peek_ts() is not None:
        limit += rnd.randint(0, 400)
        max_rows = rnd.randint(1, 500)
        got_ts, got = source.take(limit, max_rows)
        assert len(got) <= max_rows and len(got_ts) == len(got)
        assert all(t <= limit for t in got_ts)
        expected_more = [t for t in ts[len(taken) + len(got):] if t <= limit]
        assert len(got) == max_rows or not expected_more  # it stops short only at the limit
        taken += got
    assert taken == lines


def test_row_source_hands_out_blocks_of_the_files_bytes_and_parses_only_what_a_bisection_looks_at() -> None:
    """``RowSource.take_block`` gives the same rows as ``take``, as slices of the file's bytes, with the newest ts.

    A malformed row that a bisection looks at makes the block parsed whole: that row is counted and dropped. One
    no bisection looks at goes out as it is (the receiver's ingest counts it), as a sensor's would.
    """
    from simulator.sources import RowSource

    rnd = random.Random(11)
    ts, t = [], 0
    for _ in range(3000):
        t += rnd.choice((0, 1, 5, 40))
        ts.append(t)
    lines = [b"4,%d,%d\n" % (t, k) for k, t in enumerate(ts)]
    cuts = sorted(rnd.sample(range(1, len(lines)), 30))
    blocks = [b"".join(lines[a:b]) for a, b in zip([0, *cuts], [*cuts, len(lines)], strict=True)]
    source = RowSource("SENSOR4", iter(blocks))
    data, sent, limit = b"", 0, 0
    while source.peek_ts() is not None:
        limit += rnd.randint(0, 400)
        max_rows = rnd.randint(1, 500)
        rows, newest, got = source.take_block(limit, max_rows)
        assert got.count(b"\n") == rows <= max_rows and (newest is None) == (rows == 0)
        if rows:
            assert newest == ts[sent + rows - 1] <= limit
        expected_more = [t for t in ts[sent + rows:] if t <= limit]
        assert rows == max_rows or not expected_more  # it stops short only at the limit
        data, sent = data + got, sent + rows
    assert data == b"".join(lines) and source.counts.malformed == 0

    looked_at = RowSource("SENSOR4", iter([b"4,1,a\n4,2,b\n4,x,c\n"]))  # the last row is the first looked at
    assert looked_at.take_block(10, 100) == (2, 2, b"4,1,a\n4,2,b\n") and looked_at.counts.malformed == 1
    passed_on = RowSource("SENSOR4", iter([b"4,1,a\n4,x,b\n4,3,c\n"]))
    assert passed_on.take_block(10, 100) == (3, 3, b"4,1,a\n4,x,b\n4,3,c\n") and passed_on.counts.malformed == 0
    every_ts = RowSource("SENSOR4", iter([b"4,1,a\n4,x,b\n4,3,c\n"]))  # ``take`` parses every row
    assert every_ts.take(10, 100) == ([1, 3], [b"4,1,a\n", b"4,3,c\n"]) and every_ts.counts.malformed == 1
