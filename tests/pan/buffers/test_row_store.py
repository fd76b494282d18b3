"""The row store: ids for the rows of int64 record batches, their ts, their fields, and letting them go."""

from __future__ import annotations

import random

import pytest

from pan.buffers.row_store import RowStore
from pan.wire import arrow_pages

pa = pytest.importorskip("pyarrow")


def page_batch(tuples: list[dict]) -> object:
    """The record batch a column reader gets for a page of these tuples (through the Arrow codec)."""
    return arrow_pages.decode_columns(arrow_pages.encode_page({"status": "ok", "tuples": tuples}))["tuples"]


def rows(first: int, n: int, rng: random.Random) -> list[dict[str, int]]:
    return [{"i": first + k, "ts": rng.randrange(-2**62, 2**62), "a": rng.randrange(-2**63, 2**63), "b": k}
            for k in range(n)]


def test_ids_give_back_ts_fields_and_tuples_in_any_order_across_batches() -> None:
    rng = random.Random(7)
    store = RowStore(("b", "ts"))
    pages = [rows(first, n, rng) for first, n in ((0, 5), (5, 1), (6, 300), (306, 40))]
    ids: list[int] = []
    for page in pages:
        ids += store.add(page_batch(page))
    every = [row for page in pages for row in page]
    assert ids == list(range(len(every)))  # one id per row, in order
    order = ids[:]
    rng.shuffle(order)
    assert store.ts(order) == [every[k]["ts"] for k in order]
    assert store.tuples(order[:50]) == [every[k] for k in order[:50]]  # whole tuples, as the JSON page decodes
    taken = store.take(order[:200])
    assert taken.tolist() == [[every[k]["b"], every[k]["ts"]] for k in order[:200]]  # the store's fields only
    assert store.held == len(every) - 200
    store.take(order[200:])
    assert store.counters() == {"rows_stored": len(every), "rows_held": 0, "chunks_held": 0, "batches_as_tuples": 0}


def test_a_batch_that_is_not_all_int64_goes_as_dicts() -> None:
    store = RowStore(("ts", "x"))
    floats = [{"i": 0, "ts": 1, "x": 0.5}, {"i": 1, "ts": 2, "x": 1}]
    missing = [{"i": 2, "ts": 3, "x": 1}, {"i": 3, "ts": 4}]
    without_x = [{"i": 4, "ts": 5, "y": 1}]
    assert store.add(page_batch(floats)) == floats
    assert store.add(page_batch(missing)) == missing  # a null (a tuple without the key) stays missing
    assert store.add(page_batch(without_x)) == without_x  # the store's field is not there
    assert store.add(page_batch(rows(5, 3, random.Random(3))).slice(3)) == []  # nothing new in a page
    assert store.counters()["batches_as_tuples"] == 3 and store.held == 0


def test_forgotten_rows_are_let_go_and_a_store_needs_ts() -> None:
    store = RowStore(("ts",))
    ids = store.add(page_batch(rows(0, 10, random.Random(1))))
    more = store.add(page_batch(rows(10, 10, random.Random(2))))
    store.take(ids[:4])
    store.forget([*ids[4:], {"ts": 3}])  # a dict among them is no row of the store
    assert store.counters()["chunks_held"] == 1 and store.held == 10
    store.forget(more)
    assert store.held == 0 and store.counters()["chunks_held"] == 0
    with pytest.raises(ValueError, match="'ts'"):
        RowStore(("x", "y"))
