"""Column inputs: a component fed the row ids of Arrow pages writes what the per-event path writes from dicts.

The twin with column inputs gets every page as a worker's pull would: the page
encoded and decoded as Arrow (`pan/wire/arrow_pages.py`), its rows put in the
component's row store, row ids fed through the ordering unit. The other twin
gets the same tuples as dicts, event by event. Pages come per stream in
rounds, with one stream held back for a while (its events come late) and one
page whose values are not all ints (it goes as dicts on both twins).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import orjson
import pytest

from pan.components.testing import build_component, output_tuples
from pan.ingest.lines import END_OF_STREAM
from pan.ingest.server import send_lines
from pan.input.local import LocalPublishers
from pan.repository.server import RepositoryServer
from pan.wire import arrow_pages
from pan.worker.worker import Worker
from tests.conftest import HOST, WorkerGroup, forwarder, free_port, make_workflow, wait_until
from tests.support.match_feed import OFFLINE, as_events, load_match
from tests.workers.paths import Twins
from workers import debs
from workers.debs import PS_PER_S

pytestmark = [
    pytest.mark.process,  # the rows come from a generated match
    pytest.mark.skipif(not arrow_pages.available(), reason="column inputs need pyarrow"),
]

ROUND_PS = PS_PER_S // 2
PLAYERS = ["A1", "B3"]
HELD_BACK = [debs.sensor_stream(sid) for sid in debs.PLAYER_SENSORS["A3"]]


class ColumnTwins(Twins):
    """``arrays`` takes its inputs as columns (row ids), ``per_event`` as dicts; ``arrays`` None: the twin with
    columns leaves the param unset (tables of row ids on arrays from ``MIN_ARRAY_ROWS`` on)."""

    def __init__(self, type_name: str, params: dict[str, Any], arrays: bool | None = True) -> None:
        super().__init__(type_name, {**OFFLINE, **params}, buffer_size=400_000)
        if arrays is None:
            self.arrays = build_component(type_name, {**OFFLINE, **params}, buffer_size=400_000)
        assert self.arrays.row_store is not None and self.per_event.row_store is None
        self.next_index: dict[str, int] = {}

    def feed(self, stream: str, events: list[dict[str, Any]]) -> None:
        """One page of ``stream``: ids of its Arrow page's rows to one twin, its tuples to the other."""
        self.feed_pages(stream, [events])

    def feed_tuples(self, stream: str, events: list[dict[str, Any]]) -> None:
        """One JSON page of an ordinary stream: its tuples to both twins."""
        first = self.next_index.get(stream, 0)
        page = [{"i": first + k, **ev} for k, ev in enumerate(events)]
        self.next_index[stream] = first + len(page)
        self.arrays.feed(stream, page)
        self.per_event.feed(stream, [dict(t) for t in page])
        self.check()

    def feed_pages(self, stream: str, pages: list[list[dict[str, Any]]]) -> None:
        """Pages of ``stream`` read at once (as a component reads what several pulls brought): their items in one
        ``feed``, which mixes row ids and dicts where a page was not all ints."""
        items, tuples = [], []
        for events in pages:
            first = self.next_index.get(stream, 0)
            page = [{"i": first + k, **ev} for k, ev in enumerate(events)]
            self.next_index[stream] = first + len(page)
            batch = arrow_pages.decode_columns(arrow_pages.encode_page({"status": "ok", "tuples": page}))["tuples"]
            items += self.arrays.row_store.add(batch)
            tuples += page
        self.arrays.feed(stream, items)
        self.per_event.feed(stream, tuples)
        self.check()


@pytest.fixture(scope="module")
def match_rows(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    return np.loadtxt(load_match(tmp_path_factory)["folder"] / "full-game", delimiter=",", dtype=np.int64)


def feed_in_rounds(twins: ColumnTwins, rows: np.ndarray, streams: list[str], seconds: float) -> None:
    """The rows of ``streams`` of the first ``seconds``, a page per stream per half second of event time;
    the first stream's pages of rounds 2-4 come in round 5 (late for a K of 1 s), and one page of the
    second stream holds a float value and a tuple without ts."""
    start = int(rows[0, 1])
    held: list[list[dict[str, Any]]] = []
    for n in range(int(seconds * PS_PER_S // ROUND_PS)):
        lo = start + n * ROUND_PS
        part = rows[(rows[:, 1] >= lo) & (rows[:, 1] < lo + ROUND_PS)]
        for position, stream in enumerate(streams):
            page = as_events(part[part[:, 0] == int(stream.removeprefix("SENSOR"))])
            if not page:
                continue
            if position == 0 and 2 <= n <= 4:
                held.append(page)
                continue
            if position == 1 and n == 3:  # three pages read at once; the middle one is not all ints (dicts)
                third = len(page) // 3
                odd = page[third:2 * third]
                odd[0]["x"] += 0.5
                del odd[-1]["ts"]  # counted as untimed by both twins, and dropped
                twins.feed_pages(stream, [page[:third], odd, page[2 * third:]])
                continue
            twins.feed(stream, page)
        if n == 5:
            for page in held:
                twins.feed(streams[0], page)
    twins.finish()


def compared_counters(twins: ColumnTwins) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The twins' counters, to be equal, and the row store's: the twin with columns has a row store, and its
    ordering unit merged ids as arrays (checked here), which the per-event twin did not."""
    with_columns, per_event = twins.arrays.counters(), twins.per_event.counters()
    store = with_columns.pop("column_inputs")
    assert with_columns["ordering"].pop("released_as_arrays") > 0
    assert per_event["ordering"].pop("released_as_arrays") == 0
    return with_columns, per_event, store


def check_same(twins: ColumnTwins) -> dict[str, Any]:
    """Counters alike on both twins (the row store's apart); the row store let every row go."""
    with_columns, per_event, store = compared_counters(twins)
    assert with_columns == per_event
    ordering = per_event["ordering"]
    if twins.arrays.arrays:
        # Every stored row that was not late (side: those go to the late stream alone) was computed on arrays,
        # and so were the dicts of the page that was not all ints, but for the run of tuples with the float.
        assert store["rows_stored"] - ordering["late"] <= twins.arrays.rows_on_arrays < ordering["released"]
    else:  # arrays unset: tables of row ids from MIN_ARRAY_ROWS on, dicts event by event
        assert 0 < twins.arrays.rows_on_arrays <= store["rows_stored"] - ordering["late"]
    assert twins.per_event.rows_on_arrays == 0
    assert store["rows_held"] == 0 and store["chunks_held"] == 0 and store["batches_as_tuples"] == 1
    assert with_columns["untimed_tuples"] == 1
    return store


@pytest.mark.parametrize("arrays", [True, None])
def test_player_averages_from_column_inputs_are_the_per_event_paths(
    match_rows: np.ndarray, arrays: bool | None
) -> None:
    twins = ColumnTwins("player_average", {"players": ["A1", "A2", "B3", "REFEREE"]}, arrays)
    streams = list(twins.arrays.ctx.inputs)
    feed_in_rounds(twins, match_rows, streams, 6)
    store = check_same(twins)
    late = twins.per_event.counters()["ordering"]["late"]
    assert late > 100, "the held pages must come late"
    assert store["rows_stored"] > 5_000 and twins.compared > 4 * 250
    late_stream = next(name for name in twins.arrays.ctx.outputs if name.endswith("_late"))
    assert len(twins.arrays.ctx.outputs[late_stream].buffer) == late  # the late rows, as whole tuples


@pytest.mark.parametrize("arrays", [True, None])
def test_the_active_ball_from_column_inputs_is_the_per_event_paths(match_rows: np.ndarray, arrays: bool | None) -> None:
    twins = ColumnTwins("active_ball", {}, arrays)
    streams = [debs.sensor_stream(b) for b in debs.BALLS]
    in_play = match_rows[np.isin(match_rows[:, 0], debs.BALLS_FIRST_HALF) & (match_rows[:, 1] >= debs.FIRST_HALF[0])]
    feed_in_rounds(twins, in_play, streams, 4)
    check_same(twins)
    assert twins.per_event.counters()["emitted"] > 1_000 and twins.per_event.counters()["ordering"]["late"] > 0


@pytest.mark.parametrize("params", [{"arrays": True}, {"arrays": True, "policy": "nfp"}])
def test_hits_from_column_inputs_are_the_per_event_paths(match_rows: np.ndarray, params: dict[str, Any]) -> None:
    """The players' rows as row ids, the active ball's as tuples (an ordinary stream's JSON pages), interleaved
    in the ordering unit: the hits of the per-event path, one player's rows held back a second (late)."""
    twins = ColumnTwins("ball_hits", {key: v for key, v in params.items() if key != "arrays"})
    start = int(match_rows[0, 1])
    ball = build_component("active_ball", {**OFFLINE, "arrays": False}, buffer_size=10**6)
    held: list[tuple[str, list[dict[str, Any]]]] = []
    for n in range(int(40 * PS_PER_S // ROUND_PS)):
        lo = start + n * ROUND_PS
        part = match_rows[(match_rows[:, 1] >= lo) & (match_rows[:, 1] < lo + ROUND_PS)]
        for stream in twins.arrays.ctx.inputs:
            if stream == "ACTIVEBALL":
                before = len(ball.ctx.outputs["ACTIVEBALL"].buffer)
                ball.process(as_events(part[np.isin(part[:, 0], debs.BALLS)]))
                tuples = [orjson.loads(t) for t in ball.ctx.outputs["ACTIVEBALL"].buffer.read(
                    before - 1, oldest=10**6).items]
                twins.feed_tuples(stream, [{k: v for k, v in t.items() if k != "i"} for t in tuples])
                continue
            page = as_events(part[part[:, 0] == int(stream.removeprefix("SENSOR"))])
            if page and n in (10, 11) and stream in HELD_BACK:  # one player's rows come a second late
                held.append((stream, page))
            elif page:
                twins.feed(stream, page)
        if n == 13:
            for stream, page in held:
                twins.feed(stream, page)
    twins.finish()
    with_columns, per_event, store = compared_counters(twins)
    assert with_columns == per_event and twins.compared >= per_event["hits"] >= 5  # (compared: late rows too)
    assert per_event["ordering"]["late"] > 0 and store["rows_held"] == 0 and store["rows_stored"] > 100_000
    on_arrays = twins.arrays.rows_on_arrays
    assert (on_arrays == 0) if params.get("policy") == "nfp" else (on_arrays > 0)


def test_column_inputs_follow_the_arrays_param_and_the_wire(monkeypatch: pytest.MonkeyPatch) -> None:
    """``arrays`` unset or true (with Arrow on): column inputs; false, or ``PAN_WIRE=json``: dicts alone."""
    default = build_component("player_average", {"players": ["A1"]})
    assert default.row_store is not None and default.arrays is False  # dicts still go event by event
    assert build_component("player_average", {"players": ["A1"], "arrays": True}).row_store is not None
    assert build_component("player_average", {"players": ["A1"], "arrays": False}).row_store is None
    assert build_component("ball_hits", {"arrays": True}).row_store is not None  # the players' rows
    assert build_component("ball_hits", {}).row_store is None  # only on request (COLUMN_INPUTS_UNSET)
    assert build_component("player_possession", {}).row_store is None  # none of its inputs is a column buffer
    monkeypatch.setenv(arrow_pages.WIRE_ENV, "json")
    assert build_component("player_average", {"players": ["A1"]}).row_store is None


def player_average(name: str, **params: Any) -> dict[str, Any]:
    return {"name": name, "type": "player_average", "host": HOST, "port": free_port(), "buffer_size": 50_000,
            "params": {"players": PLAYERS, "clock_mode": "watermark", **params}}


async def published(worker: Worker, stream: str) -> list[bytes]:
    return worker.outputs[stream].buffer.read(-1, oldest=1_000_000).items


@pytest.fixture(params=["http", "local"])
async def peer(request: pytest.FixtureRequest) -> AsyncIterator[WorkerGroup]:
    """Workers pulling each other over HTTP, or in one process (one peer, ``pan/input/local.py``)."""
    group = WorkerGroup(LocalPublishers() if request.param == "local" else None)
    yield group
    await group.stop_all()


async def test_a_worker_pulls_column_pages_into_its_row_store_and_json_pages_as_dicts(
    repository: RepositoryServer, peer: WorkerGroup, match_rows: np.ndarray, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real forwarder (column buffers) and player-average workers pulling it write what the per-event path
    writes offline. Over HTTP: one that finds a backlog (its first pages as Arrow, rows into its row store) and
    then long-polls new rows as JSON (dicts, mixed with the row ids in the ordering unit), and one reading a
    forwarder that answers only JSON, as an older peer. In process the same, with the rows themselves for the
    column pages (``ColumnOutputStream.row_page``): no Arrow stream is encoded or decoded."""
    if peer.local is not None:
        def no_arrow(*_args: Any) -> None:
            raise AssertionError("an Arrow stream in process")

        monkeypatch.setattr(arrow_pages, "encode_int_columns", no_arrow)
        monkeypatch.setattr(arrow_pages, "decode_columns", no_arrow)
    sids = [sid for player in PLAYERS for sid in debs.PLAYER_SENSORS[player]]
    start = int(match_rows[0, 1])
    part = match_rows[np.isin(match_rows[:, 0], sids) & (match_rows[:, 1] < start + 3 * PS_PER_S)]
    backlog = part[part[:, 1] < start + 2 * PS_PER_S]
    streams = [debs.sensor_stream(sid) for sid in sids]
    lines = [b"%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d,%d" % tuple(row) for row in part.tolist()]
    ends = [orjson.dumps({"stream": s, "ts": END_OF_STREAM, "promise": True}) for s in streams]
    source = forwarder("F", streams, buffer_size=50_000)
    [fwd] = await peer.start(make_workflow(repository.port, [source]))
    await send_lines(HOST, source["params"]["ingest_port"], lines[:len(backlog)])
    await wait_until(lambda: sum(len(fwd.outputs[s].buffer) for s in streams) == len(backlog), timeout_s=60)

    [live] = await peer.start(make_workflow(repository.port, [source, player_average("live")]), names=["live"])
    await wait_until(lambda: sum(c.counters.received for c in live.inputs.values()) == len(backlog), timeout_s=60)
    await send_lines(HOST, source["params"]["ingest_port"], lines[len(backlog):] + ends)  # to its long polls
    await wait_until(lambda: all(live.outputs[p].progress.wm == END_OF_STREAM for p in PLAYERS), timeout_s=60)

    reference = build_component("player_average", {"players": PLAYERS, "clock_mode": "watermark", "arrays": False})
    for stream in streams:
        reference.feed(stream, [orjson.loads(item) for item in await published(fwd, stream)])
    reference.finish()
    expected = {p: output_tuples(reference, p) for p in PLAYERS}
    assert min(map(len, expected.values())) > 100

    # The backlog came as columns (each stream's first page); of the rest, at least each stream's first long poll
    # came as JSON (more may have come as columns, had the poll found many new rows).
    stored_within = {live: (len(backlog), len(part) - len(streams))}
    if peer.local is None:
        fwd.api.arrow = False  # now an older peer
        [old] = await peer.start(make_workflow(repository.port, [source, player_average("old")]), names=["old"])
        await wait_until(lambda: all(old.outputs[p].progress.wm == END_OF_STREAM for p in PLAYERS), timeout_s=60)
        stored_within[old] = (0, 0)  # nothing as columns from the old peer
    for worker, (least, most) in stored_within.items():
        for player in PLAYERS:
            got = [orjson.loads(t) for t in await published(worker, player)]
            assert got == expected[player], (worker.spec.name, player)
        store = worker.component.counters()["column_inputs"]
        assert least <= store["rows_stored"] <= most, (worker.spec.name, store)
        merged_as_arrays = worker.component.counters()["ordering"]["released_as_arrays"]
        assert (merged_as_arrays > 0) == (least > 0), (worker.spec.name, merged_as_arrays)  # the backlog's ids
        assert store["rows_held"] == 0 and store["batches_as_tuples"] == 0
        assert sum(c.counters.received for c in worker.inputs.values()) == len(part)
