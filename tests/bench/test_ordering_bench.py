"""`pan bench ordering` runs the row-id variants side by side with the others, and every one releases every
event (the benchmark checks the count itself)."""

from __future__ import annotations

import argparse

import pytest

from benchmarks import ordering_bench


@pytest.mark.process  # the run's header asks `uname` for the machine
def test_row_ids_go_through_as_lists_and_as_arrays(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(events=8_000, streams=4, batch=50, disorder=0.05, reps=2, write=None)
    assert ordering_bench.run(args) == 0


def test_both_forms_release_the_same_ids_in_the_same_order() -> None:
    from pan.ordering import OrderingSettings, OrderingUnit

    streams, batches = ordering_bench.make_input(8_000, 4, 50, 0.05)
    released = {}
    for as_arrays in (False, True):
        unit = OrderingUnit(OrderingSettings(initial_k=10**9), streams)
        push = unit.push_rows if as_arrays else unit.push_timed
        out: list[int] = []
        for stream, tss, ids in ordering_bench.row_batches(batches, as_arrays):
            got = push(stream, tss, ids)
            out += list(got.events) + list(got.late)
        out += list(unit.flush().events)
        released[as_arrays] = [int(i) for i in out]
    assert sorted(released[False]) == list(range(8_000))
    assert released[True] == released[False]
