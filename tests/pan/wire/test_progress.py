"""StreamProgress: the typed `/data` meta encodes to exactly the JSON it was decoded from."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from pan.buffers.streams import OutputStream
from pan.wire.progress import EMPTY, END_OF_STREAM, StreamProgress

WIRE_SAMPLES = [
    b"{}",
    b'{"epoch":"4f1c0a"}',
    b'{"epoch":"4f1c0a","wm":123}',
    b'{"epoch":"4f1c0a","k":5000000000,"clk":null,"late":0}',
    b'{"epoch":"4f1c0a","k":5,"clk":17,"late":2,"wm":4611686018427387904}',
    b'{"k":"x","wm":true,"clk":1.5,"late":-1,"epoch":7}',  # malformed values of known keys
    b'{"epoch":"e","future":{"a":[1,2]},"wm":3}',  # a key this version does not know
    b'{"k":-4}',  # a negative K is no K
]


@pytest.mark.parametrize("wire", WIRE_SAMPLES)
def test_round_trip_keeps_the_wire_json(wire: bytes) -> None:
    progress = StreamProgress.from_json(orjson.loads(wire))
    assert orjson.loads(orjson.dumps(progress.to_json())) == orjson.loads(wire)


def test_producer_progress_encodes_byte_for_byte_as_the_meta_dict_did() -> None:
    progress = StreamProgress(epoch="e").merged(StreamProgress.from_json({"k": 5, "clk": None, "late": 0}))
    progress = progress.merged(StreamProgress(wm=9))
    assert orjson.dumps(progress.to_json()) == b'{"epoch":"e","k":5,"clk":null,"late":0,"wm":9}'


def test_typed_fields_hold_only_well_formed_values() -> None:
    progress = StreamProgress.from_json({"k": "x", "wm": True, "clk": None, "epoch": 7, "late": 3})
    assert (progress.epoch, progress.k, progress.clk, progress.late, progress.wm) == (None, None, None, 3, None)
    assert dict(progress.other) == {"k": "x", "wm": True, "clk": None, "epoch": 7}
    assert StreamProgress.from_json(None) is EMPTY and StreamProgress.from_json({}) is EMPTY


def test_merge_replaces_what_the_newer_states_like_a_dict_update() -> None:
    old = StreamProgress.from_json({"epoch": "e", "k": 5, "clk": None, "wm": 1})
    new = old.merged(StreamProgress.from_json({"k": 6, "clk": 3}))
    assert new.to_json() == {"epoch": "e", "k": 6, "clk": 3, "wm": 1}
    malformed = new.merged(StreamProgress.from_json({"wm": "soon"}))
    assert malformed.wm is None and malformed.to_json()["wm"] == "soon"


def test_end_and_reopen() -> None:
    ended = StreamProgress(epoch="e", wm=END_OF_STREAM)
    assert ended.ended and not StreamProgress(wm=1).ended
    assert ended.without_watermark().to_json() == {"epoch": "e"}
    assert StreamProgress.from_json({"wm": "x", "z": 1}).without_watermark().to_json() == {"z": 1}


def test_k_growth_and_watermark_moves() -> None:
    assert StreamProgress(k=5).k_grew_from(StreamProgress(k=4))
    assert not StreamProgress(k=4).k_grew_from(StreamProgress(k=4))
    assert not StreamProgress(k=0).k_grew_from(EMPTY)
    assert not EMPTY.k_grew_from(StreamProgress(k=4))
    assert StreamProgress(wm=-(2**62)).wm_moved_from(EMPTY)
    assert not StreamProgress(wm=3).wm_moved_from(StreamProgress(wm=3))
    assert not EMPTY.wm_moved_from(StreamProgress(wm=3))


def test_output_stream_serves_its_progress_as_meta() -> None:
    output = OutputStream("S", 10, StreamProgress(epoch="e"))
    output.publish(StreamProgress.from_json({"k": 5, "clk": None, "late": 0}))
    output.publish(StreamProgress(wm=END_OF_STREAM))
    output.reopen()
    body = output.render(-1, oldest=10, latest=None)
    assert body.endswith(b'"meta":{"epoch":"e","k":5,"clk":null,"late":0}}')
    assert output.counters()["meta"] == {"epoch": "e", "k": 5, "clk": None, "late": 0}


WELL_FORMED = [
    StreamProgress(),
    StreamProgress(epoch="e"),
    StreamProgress(k=5, clk=3),
    StreamProgress(wm=9, raw_wm=12),
    StreamProgress(epoch="f", k=0, clk=1, late=2, wm=3, raw_wm=4),
]


@pytest.mark.parametrize("old", WELL_FORMED)
def test_merging_well_formed_progress_is_the_dict_update_of_their_wire_forms(old: StreamProgress) -> None:
    for new in WELL_FORMED:
        assert old.merged(new) == StreamProgress.from_json({**old.to_json(), **new.to_json()})


def test_a_page_carries_exactly_the_latest_published_progress() -> None:
    out = OutputStream("s")
    out.publish(StreamProgress(epoch="e", k=5))
    assert orjson.loads(out.render(-1, oldest=10, latest=None))["meta"] == {"epoch": "e", "k": 5}
    out.publish(StreamProgress(wm=7))
    out.publish(StreamProgress.from_json({"x": True}))
    out.publish(StreamProgress.from_json({"x": 1}))  # equal to True in Python, not on the wire
    page = out.render(-1, oldest=10, latest=None)
    assert b'"meta":{"epoch":"e","k":5,"wm":7,"x":1}' in page


async def test_an_end_right_after_data_wakes_meta_waiting_long_polls_at_once() -> None:
    """A moved watermark of a busy stream wakes no one (its data carries it), but an end does: nothing follows
    it. Before, an end published within ``WM_QUIET_S`` of the last append reached a meta-waiting reader only when
    its long poll ran out (here 10 minutes; the test gives it 60 s)."""
    out = OutputStream("s")
    out.publish(StreamProgress(wm=1))
    out.append({"v": 0})
    waiting = asyncio.create_task(out.buffer.wait_beyond(0, timeout=600.0, meta=True))
    await asyncio.sleep(0)
    out.publish(StreamProgress(wm=END_OF_STREAM))  # right after the append
    assert await asyncio.wait_for(waiting, 60) is False  # woken without newer data
    assert out.progress.ended


def test_a_reader_missed_a_poke_for_an_end_or_for_a_watermark_of_a_quiet_stream(monkeypatch) -> None:
    """What `/data?m=1&wm=` answers at once for (pan/worker/api.py): the pokes ``publish`` makes, had the reader
    been waiting. A busy stream's moved watermark pokes no one, so a reader has missed nothing there."""
    from pan.buffers import watermarks

    out = OutputStream("s")
    out.append({"v": 0})
    out.publish(StreamProgress(wm=5))
    monkeypatch.setattr(watermarks, "WM_QUIET_S", 3600.0)  # the stream is busy: its data carries the watermark
    assert not out.missed_poke(None) and not out.missed_poke(3) and not out.missed_poke(5)
    monkeypatch.setattr(watermarks, "WM_QUIET_S", 0.0)  # quiet: the watermark's poke went before the poll
    assert out.missed_poke(None) and out.missed_poke(3) and not out.missed_poke(5)
    monkeypatch.setattr(watermarks, "WM_QUIET_S", 3600.0)
    out.publish(StreamProgress(wm=END_OF_STREAM))  # an end is always announced, busy or not
    assert out.missed_poke(5) and out.missed_poke(None) and not out.missed_poke(END_OF_STREAM)
