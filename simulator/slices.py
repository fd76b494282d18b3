"""Writing a generated match's rows: slices of event time, formatted in forked processes, written in order.

Both generators (exact and realistic) plan their halves first and then turn
each slice of event time into CSV rows independently, so slices can be
formatted in parallel and written to ``full-game`` in ts order.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
from collections.abc import Callable, Iterable, Iterator, Sequence
from multiprocessing.pool import Pool
from pathlib import Path
from typing import BinaryIO, Protocol

#: (session index, first ps, end ps) of one slice.
SliceJob = tuple[int, int, int]


class Span(Protocol):
    base_ps: int
    end_ps: int


@contextlib.contextmanager
def fork_pool(workers: int) -> Iterator[Pool]:
    """Worker processes that inherit the planned sessions from module state (fork, no pickling).

    Once the block is done the workers end by themselves (``close``, ``join``); only a failure terminates them.
    And each dies of SIGTERM, SIGHUP and SIGINT as by default, not by a Python handler it inherited from its
    parent (`pan bench` turns SIGTERM into a clean stop): a benchmark once waited forever in ``Pool.terminate``
    for a worker, waiting on the pool's queue lock, that had not died of its SIGTERM."""
    pool = multiprocessing.get_context("fork").Pool(workers, initializer=_default_signals)
    try:
        yield pool
    except BaseException:
        pool.terminate()
        raise
    pool.close()
    pool.join()


def _default_signals() -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)


def slice_jobs(sessions: Sequence[Span], slice_ps: int) -> list[SliceJob]:
    return [(i, lo, min(lo + slice_ps, s.end_ps)) for i, s in enumerate(sessions)
            for lo in range(s.base_ps, s.end_ps, slice_ps)]


def write_slices(path: Path, jobs: list[SliceJob], job: Callable[[SliceJob], tuple[bytes, int]],
                 workers: int, on_slice: Callable[[int, int], None] | None = None) -> int:
    """Format every slice with ``job`` (in ``workers`` processes when it pays) and write them in order.

    ``on_slice(done, total)`` after each slice written (a progress bar)."""
    rows = 0
    with open(path, "wb") as f:
        if workers > 1 and len(jobs) > 2:
            with fork_pool(workers) as pool:
                results = pool.imap(job, jobs, chunksize=1)
                rows = _write_all(f, results, len(jobs), on_slice)
        else:
            rows = _write_all(f, (job(one) for one in jobs), len(jobs), on_slice)
    return rows


def _write_all(f: BinaryIO, results: Iterable[tuple[bytes, int]], total: int,
               on_slice: Callable[[int, int], None] | None) -> int:
    rows = 0
    for done, (data, n) in enumerate(results, 1):
        f.write(data)
        rows += n
        if on_slice is not None:
            on_slice(done, total)
    return rows
