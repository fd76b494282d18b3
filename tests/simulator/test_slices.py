"""The generators' worker pool (`simulator/slices.py`): its workers never outlive the block.

A forked worker inherits its parent's Python signal handlers. `pan bench` turns SIGTERM into a clean stop of
its own, and once a pool worker with that handler did not die of ``Pool.terminate``'s SIGTERM: a benchmark
waited for it forever. Workers now end by themselves, and die of a signal as by default.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from simulator.slices import fork_pool

pytestmark = pytest.mark.process  # forks worker processes


def _sigterm_handler(_: int) -> str:
    return repr(signal.getsignal(signal.SIGTERM))


@pytest.fixture
def sigterm_handled_here() -> Iterator[None]:
    """A parent with a Python SIGTERM handler of its own (as `pan bench` has)."""
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_a_worker_dies_of_sigterm_as_by_default_whatever_handler_its_parent_has(sigterm_handled_here: None) -> None:
    with fork_pool(2) as pool:
        assert set(pool.map(_sigterm_handler, range(4))) == {repr(signal.SIG_DFL)}


def test_workers_end_with_the_block_and_a_failure_inside_terminates_them() -> None:
    with fork_pool(2) as pool:
        workers = list(pool._pool)  # type: ignore[attr-defined]
        assert pool.map(abs, [-1, -2]) == [1, 2]
    assert all(w.exitcode == 0 for w in workers)  # closed and joined: they ended by themselves
    with pytest.raises(ZeroDivisionError), fork_pool(2) as pool:
        workers = list(pool._pool)  # type: ignore[attr-defined]
        raise ZeroDivisionError
    assert all(w.exitcode is not None for w in workers)
