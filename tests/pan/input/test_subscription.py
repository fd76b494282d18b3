"""The rules of ``SubscriptionState``, without any server: one `/data` answer at a time."""

from typing import Any

from pan.input.subscription import LAGGING_FETCHES_BEFORE_SWITCH, SubscriptionState
from pan.repository.client import Source

PRODUCER = Source("127.0.0.1", 9001, rep=False, lvl=0)
REPEATER = Source("127.0.0.1", 9002, rep=True, lvl=1)


def answer(indices: list[int], last: int | None = None, epoch: str | None = "e1") -> dict[str, Any]:
    """A checked `/data` answer holding tuples with these indices."""
    meta = {} if epoch is None else {"epoch": epoch}
    if last is None:
        last = indices[-1] if indices else -1
    return {"tuples": [{"i": i, "ts": 10 * i} for i in indices], "last": last, "meta": meta}


def subscribed(source: Source = PRODUCER, **options: Any) -> SubscriptionState:
    state = SubscriptionState("S", **options)
    state.source = source
    return state


def test_a_contiguous_page_advances_the_position_and_counts_what_it_delivers() -> None:
    state = subscribed()
    fetch = state.apply(answer([0, 1, 2]))
    assert [t["i"] for t in fetch.tuples] == [0, 1, 2] and not fetch.gaps
    assert (state.position, state.epoch, state.upstream_last) == (2, "e1", 2)
    assert (state.stats.received, state.stats.missed) == (3, 0)


def test_a_new_epoch_resets_to_the_policy_and_delivers_nothing_of_that_answer() -> None:
    earliest = subscribed()
    earliest.apply(answer([0, 1, 2, 3]))
    fetch = earliest.apply(answer([0, 1], epoch="e2"))
    assert fetch.reset and fetch.tuples == [] and "epoch e2" in fetch.reset_reason
    assert (earliest.position, earliest.epoch, earliest.stats.resets) == (-1, "e2", 1)

    latest = subscribed(reset="latest")
    latest.apply(answer([0, 1, 2, 3]))
    assert latest.apply(answer([0, 1], epoch="e2")).reset
    assert latest.position == 1  # resumes after the restarted producer's newest tuple


def test_the_same_epoch_or_an_unknown_one_is_no_restart() -> None:
    state = subscribed()
    state.apply(answer([0, 1]))
    assert not state.apply(answer([2], epoch=None)).reset
    assert not state.apply(answer([3], epoch="e1")).reset
    assert state.position == 3 and state.stats.resets == 0


def test_a_jump_in_indices_is_a_gap_bounded_by_the_first_and_last_missed_index() -> None:
    state = subscribed()
    state.apply(answer([0, 1]))
    fetch = state.apply(answer([5, 6, 9]))
    assert fetch.gaps == [(2, 4), (7, 8)] and fetch.missed == 5
    assert [t["i"] for t in fetch.tuples] == [5, 6, 9] and state.position == 9
    assert (state.stats.missed, state.stats.gaps, state.stats.received) == (5, 2, 5)
    markers = fetch.markers(state.position, state.epoch)
    assert markers[0] == {"gap": {"from": 2, "to": 4}} and markers[3] == {"gap": {"from": 7, "to": 8}}


def test_tuples_already_delivered_are_dropped_not_counted_as_gaps() -> None:
    state = subscribed()
    state.apply(answer([0, 1, 2]))
    fetch = state.apply(answer([1, 2, 3, 4]))
    assert [t["i"] for t in fetch.tuples] == [3, 4] and fetch.gaps == [] and fetch.missed == 0
    assert state.stats.received == 5


def test_start_latest_learns_the_position_from_the_first_answer() -> None:
    state = subscribed(start="latest")
    assert not state.positioned
    fetch = state.apply(answer([], last=41))
    assert fetch.tuples == [] and state.positioned and state.position == 41


def test_a_position_beyond_the_producers_last_index_resets() -> None:
    state = subscribed(start=50)
    fetch = state.apply(answer([], last=9))
    assert fetch.reset and state.position == -1 and state.source is PRODUCER


def test_a_repeater_behind_the_position_is_dropped_after_some_empty_answers() -> None:
    state = subscribed(REPEATER, start=50)
    for _ in range(LAGGING_FETCHES_BEFORE_SWITCH - 1):
        assert not state.apply(answer([], last=9)).reset
        assert state.source is REPEATER
    state.apply(answer([], last=9))
    assert state.source is None and REPEATER.endpoint in state.failed and state.stats.failovers == 1
    assert state.position == 50  # the next publisher resumes where we were


def test_the_next_lookup_leaves_out_failed_and_configured_publishers_until_nobody_publishes() -> None:
    state = subscribed(exclude=("127.0.0.1:9999",))
    assert state.excluded() == {"127.0.0.1:9999"}
    state.drop_source("connection refused")
    assert state.source is None and (state.stats.failovers, state.stats.errors) == (1, 1)
    assert state.excluded() == {"127.0.0.1:9999", PRODUCER.endpoint}
    state.source = REPEATER
    state.drop_source("timeout")
    assert state.excluded() == {"127.0.0.1:9999", PRODUCER.endpoint, REPEATER.endpoint}
    state.nobody_publishes()  # the failed ones may be back; the configured exclusion stays
    assert state.excluded() == {"127.0.0.1:9999"}


def test_back_off_doubles_up_to_the_maximum_and_starts_over_after_an_answer() -> None:
    state = SubscriptionState("S", retry_backoff_s=(0.1, 0.5))
    assert [state.next_backoff_s() for _ in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    state.answered()
    assert state.next_backoff_s() == 0.1
