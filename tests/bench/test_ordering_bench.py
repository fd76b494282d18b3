"""`pan bench ordering`'s row-id variants release the same ids in the same order (tests/bench/test_bench_cli.py
runs the benchmark itself)."""

from __future__ import annotations

from benchmarks import ordering_bench


def test_both_forms_release_the_same_ids_in_the_same_order() -> None:
    from pan.ordering.settings import OrderingSettings
    from pan.ordering.unit import OrderingUnit

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
