"""workers/windows.py: the sliding sums of Q1, Q2 and Q3, checked directly.

Edges, exact boundaries, shared buckets."""

from __future__ import annotations

import random

import pytest

from workers.debs import PS_PER_S
from workers.possession import finished_time
from workers.windows import Window, Windows


def buckets_of(window: Window[str]) -> list[tuple[int, int]]:
    return [(b.start, b.end) for b in window.buckets]


def test_a_bucket_leaves_when_it_ends_exactly_at_the_window_start() -> None:
    (w,) = windows = Windows[str]([10])
    for start in (0, 5, 10):
        windows.open(start, start + 5)
        windows.add("k", start + 1)  # 1, 6, 11
    windows.slide(15)  # holds what ends after 5: [5, 10) and [10, 15)
    assert buckets_of(w) == [(5, 10), (10, 15)] and w.sums == {"k": 17}
    windows.slide(19)  # [5, 10) ends after 9: still inside
    assert buckets_of(w) == [(5, 10), (10, 15)] and w.sums == {"k": 17}
    windows.slide(20)  # ends at 10 = 20 - 10: out
    assert buckets_of(w) == [(10, 15)] and w.sums == {"k": 11}
    windows.slide(25)
    assert buckets_of(w) == [] and w.sums == {} and w.oldest() is None


def test_empty_windows_slide_and_read_as_nothing() -> None:
    windows = Windows[int]([PS_PER_S, None])
    windows.slide(10 * PS_PER_S)
    assert [w.sums for w in windows] == [{}, {}]
    assert [w.oldest() for w in windows] == [None, None]
    windows.open(0, PS_PER_S)  # a bucket nothing is added to
    windows.slide(3 * PS_PER_S)
    assert [w.sums for w in windows] == [{}, {}] and len(windows[0].buckets) == 0


def test_the_whole_game_keeps_everything_and_holds_no_buckets() -> None:
    short, whole = windows = Windows[str]([PS_PER_S, None])
    for n in range(100):
        windows.open(n * PS_PER_S, (n + 1) * PS_PER_S)
        windows.add("a", 7)
    windows.slide(100 * PS_PER_S)
    assert whole.sums == {"a": 700} and len(whole.buckets) == 0 and whole.length is None
    assert short.sums == {"a": 7} and buckets_of(short) == [(99 * PS_PER_S, 100 * PS_PER_S)]  # the last second
    windows.open(100 * PS_PER_S, 101 * PS_PER_S)
    windows.add("a", 1)
    windows.slide(101 * PS_PER_S)
    assert short.sums == {"a": 1} and whole.sums == {"a": 701}


def test_windows_share_buckets_and_keep_their_own_sums() -> None:
    windows = Windows[int]([2, 4, None])
    for t in range(6):
        windows.open(t, t + 1)
        windows.add(t % 2, 10 + t)
    windows.slide(6)
    two, four, whole = windows
    assert two.sums == {0: 14, 1: 15}  # buckets 4, 5
    assert four.sums == {0: 12 + 14, 1: 13 + 15}  # buckets 2..5
    assert whole.sums == {0: 10 + 12 + 14, 1: 11 + 13 + 15}
    assert two.buckets[0] is four.buckets[2]  # one bucket object, held by both


def test_a_key_is_present_exactly_while_a_bucket_inside_holds_it() -> None:
    """Zero amounts add no key: a key whose sum returns to 0 is dropped, and dropping it twice never fails."""
    (w,) = windows = Windows[str]([3])
    for t in range(3):
        windows.open(t, t + 1)
        windows.add("zero", 0)
        windows.add("x", 1 if t == 0 else 0)
    assert w.sums == {"x": 1}
    windows.slide(4)  # bucket 0 out
    assert w.sums == {}
    windows.slide(10)
    assert w.sums == {} and len(w.buckets) == 0


def test_bad_use_is_refused() -> None:
    windows = Windows[str]([5])
    with pytest.raises(AttributeError):  # nothing to add to before the first open
        windows.add("k", 1)
    windows.open(0, 1)
    with pytest.raises(ValueError, match="negative"):
        windows.add("k", -1)
    for length in (0, -5):
        with pytest.raises(ValueError, match="positive"):
            Window[str](length)


@pytest.mark.parametrize("seed", range(5))
def test_sums_equal_a_recount_of_the_buckets_inside_at_every_slide(seed: int) -> None:
    """Random buckets, keys and amounts over a long run: every window equals a from-scratch recount, exactly."""
    rnd = random.Random(seed)
    lengths = [1, 7, 60, None]
    windows = Windows[int](lengths)
    added: list[tuple[int, int, int, int]] = []  # (start, end, key, amount)
    t = 0
    for _ in range(2000):
        start, t = t, t + rnd.randint(0, 3)
        windows.open(start, t)
        for _ in range(rnd.randint(0, 3)):
            key, amount = rnd.randint(0, 5), rnd.choice([0, 1, rnd.randint(1, 10**15)])
            windows.add(key, amount)
            added.append((start, t, key, amount))
        if rnd.random() < 0.3:
            now = t + rnd.randint(0, 2)
            windows.slide(now)
            for w, length in zip(windows, lengths, strict=True):
                expected: dict[int, int] = {}
                for _start, end, key, amount in added:
                    if amount and (length is None or end > now - length):
                        expected[key] = expected.get(key, 0) + amount
                assert w.sums == expected, (length, now)
            t = now


def test_same_input_same_sums() -> None:
    def run() -> list[dict[int, int]]:
        rnd = random.Random(42)
        windows = Windows[int]([5, None])
        for n in range(500):
            windows.open(n, n + 1)
            windows.add(rnd.randint(0, 100), rnd.randint(0, 10**9))
            windows.slide(n + 1)
        return [dict(sorted(w.sums.items())) for w in windows]

    assert run() == run()


def test_possession_window_trims_a_possession_that_began_before_it() -> None:
    """Q2's buckets are possessions: only the part of the oldest one inside the window counts."""
    windows = Windows[str]([10])
    for start, end in ((0, 4), (6, 9), (12, 15)):  # team A's finished possessions, game time
        windows.open(start, end)
        windows.add("A", end - start)
    window = windows[0]
    windows.slide(14)  # from 4: (0, 4) is out, (6, 9) wholly inside
    assert finished_time(window, "A", 14) == 3 + 3
    windows.slide(17)  # from 7: 2 of (6, 9) inside
    assert finished_time(window, "A", 17) == 2 + 3
    windows.slide(19)  # from 9: (6, 9) ends there and leaves
    assert finished_time(window, "A", 19) == 3
    windows.slide(24)  # from 14: 1 of (12, 15)
    assert finished_time(window, "A", 24) == 1
