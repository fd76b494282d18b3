"""Every DEBS component runs behind a speculative ordering unit with the outputs of a buffering one.

Each ordered worker of the 3-peer full game gets its real inputs (a generated match, its upstream
computed by the chain), fed in steps of event time with some events of every stream held back to the
next batch of the step: a speculative unit with alpha 0 emits at once, so every held-back event lands
in front of its AEP and the unit restores a snapshot, rewinds the outputs and replays. After the end
the outputs must equal the buffering unit's, tuple for tuple. A second check finds state a component
changes but does not declare in ``state_attributes`` (a replay would count or keep it twice).
"""

from __future__ import annotations

import hashlib
import io
import pickle
import random
from typing import Any

import orjson
import pytest

from benchmarks.floor_bench import json_row, run_chain, sensor_row
from benchmarks.query_delay import plain_split
from pan.components.ordered import OrderedComponent
from pan.components.snapshots import LIVE_TYPES
from pan.components.testing import OutputReader, build_component
from pan.wire.progress import END_OF_STREAM
from pan.workflow.parser import load_workflow
from simulator.simulate import interruptions_source
from simulator.sources import INTERRUPTIONS_STREAM
from tests.conftest import ROOT
from tests.support.match_feed import generate

pytestmark = [pytest.mark.process, pytest.mark.timeout(1800)]

WORKFLOW = ROOT / "workflows" / "full_game_3_peers.json"
STEP_PS = 100 * 10**9  # 100 ms of event time per step
#: Room per stream: the readers hold what they have not read (nothing is overwritten), so this only has to
#: be more than a few steps' tuples. A ring preallocates its slots: 10**7 for each of a heat map's 32
#: outputs took 2.5 GB per component.
BUFFER_SIZE = 10**5
#: What ``OrderedComponent.__init__`` sets: the middleware's, not the component's state.
BASE_ATTRIBUTES = {
    "ctx", "params", "unit", "late_output", "snapshots", "_wake", "_dirty", "_cursors", "_arrivals", "_meta_at",
    "_published_k", "untimed_tuples", "input_missed", "policy", "_input_ts", "loss_reports",
    "row_store",  # column inputs: None behind a speculative unit (a fresh buffering one has one, unused here)
}


@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """Every stream of the workflow (sources and outputs), in index order, over 6 s of a generated match."""
    work = tmp_path_factory.mktemp("spec")
    data = plain_split(generate(work / "game", 0.1, 11), work / "split")
    collected: dict[str, list[dict[str, Any]]] = {}
    readers: dict[str, OutputReader] = {}

    def on_step(chain: Any) -> None:
        for link in chain.links:
            for name in link.component.ctx.outputs:
                reader = readers.setdefault(name, OutputReader(link.component, name))
                collected.setdefault(name, []).extend(reader.new())

    for path in sorted(data.glob("SENSOR*.csv")):
        collected[path.stem] = [sensor_row(line) for line in path.read_bytes().splitlines() if line]
    run_chain(WORKFLOW, data, on_step=on_step)
    source = interruptions_source(data)
    rows = []
    while source.peek_ts() is not None:
        _ts, lines = source.take(END_OF_STREAM, 10**6)
        rows += [json_row(line) for line in lines]
    collected[INTERRUPTIONS_STREAM] = rows
    return collected


def feed(component: OrderedComponent, inputs: dict[str, list[dict[str, Any]]], seed: int) -> dict[str, str]:
    """Feed step by step, holding some events of each stream back to a second batch; digest every output."""
    rng = random.Random(seed)
    readers = {name: OutputReader(component, name) for name in component.ctx.outputs}
    digests = {name: hashlib.sha256() for name in component.ctx.outputs}
    firsts = [evs[0]["ts"] for evs in inputs.values() if evs]
    at = {name: 0 for name in inputs}
    step = min(firsts, default=0) + STEP_PS
    while any(at[n] < len(evs) for n, evs in inputs.items()):
        later: dict[str, list[dict[str, Any]]] = {}
        for name, evs in inputs.items():
            i = at[name]
            j = i
            while j < len(evs) and evs[j]["ts"] < step:
                j += 1
            if i == j:  # nothing in this step: its producer's promise comes first (a quiet sensor's edge promise)
                component._handle(component.unit.promise(name, step - 1))
            batch = [dict(e) for e in evs[i:j]]
            at[name] = j
            held = [e for e in batch if rng.random() < 0.02]
            kept = [e for e in batch if all(e is not h for h in held)]
            if kept:
                component.feed(name, kept)
            later[name] = held
        for name, held in later.items():
            if held:
                component.feed(name, held)
        for name in inputs:  # the producers' promise: nothing older than the step follows
            component._handle(component.unit.promise(name, step - 1))
        for name, reader in readers.items():
            for t in reader.new():
                digests[name].update(orjson.dumps(t))
        step += STEP_PS
    component.finish()
    out = {}
    for name, reader in readers.items():
        for t in reader.new():
            digests[name].update(orjson.dumps(t))
        out[name] = digests[name].hexdigest()
        assert reader.missed == 0, f"{name}: {reader.missed} tuples overwritten before they were read"
    return out


def comparable(value: Any) -> bytes:
    """Pickled bytes with every live object (a stream, a logger) replaced by its type's name."""
    buffer = io.BytesIO()

    class _Pickler(pickle.Pickler):
        def persistent_id(self, obj: object) -> str | None:
            return type(obj).__name__ if isinstance(obj, LIVE_TYPES) else None

    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return buffer.getvalue()


def one_worker_per_type() -> list[str]:
    """The first worker of each ordered type (the other team's twin runs the same code)."""
    first: dict[str, str] = {}
    for w in load_workflow(WORKFLOW).workers:
        if w.type != "forwarder":
            first.setdefault(w.type, w.name)
    return list(first.values())


@pytest.mark.parametrize("worker", one_worker_per_type())
def test_speculative_outputs_equal_buffering(worker: str, streams: dict[str, list[dict[str, Any]]]) -> None:
    spec = load_workflow(WORKFLOW).worker(worker)
    params, inputs_of = dict(spec.params), list(spec.inputs)
    if spec.type in ("running", "heatmap"):  # fed by player streams: two players are enough, each one's state
        params["players"] = params["players"][:2]  # is the same kind of thing (and heat maps' are large)
        inputs_of = [name for name in inputs_of if name in params["players"]]
    results = {}
    components = {}
    for mode, ordering in (("buffering", None), ("speculative", {"mode": "speculative", "alpha": 0})):
        component = build_component(spec.type, params, inputs_of, buffer_size=BUFFER_SIZE, ordering=ordering)
        assert isinstance(component, OrderedComponent)
        inputs = {name: streams.get(name, []) for name in component.ctx.inputs}
        assert any(inputs.values()), f"{worker}: no input"
        results[mode] = feed(component, inputs, seed=7)
        components[mode] = component
    metrics = components["speculative"].unit.metrics()["speculation"]
    assert metrics["replays"] > 0, metrics  # the held-back events did land in front of the AEP
    assert results["speculative"] == results["buffering"]
    # Undeclared state: anything else the component changed differs from a fresh instance's value.
    fresh = build_component(spec.type, params, inputs_of)
    declared = set(type(components["speculative"]).state_attributes or ())
    for name, value in vars(components["speculative"]).items():
        if name in BASE_ATTRIBUTES or name in declared:
            continue
        assert comparable(value) == comparable(vars(fresh).get(name)), f"{worker}: {name} changes but is not declared"


def test_speculative_player_averages_keep_their_raw_watermark(streams: dict[str, list[dict[str, Any]]]) -> None:
    """Behind a speculative unit, player averages publish ``raw_wm`` (so the ball-hit detector can speculate on
    them), and keep it: a player's raw output gets no tuple at or below the ``raw_wm`` it last published
    unless a retraction came first. One player's sensors drop out for a second while the others go on:
    the settled release point then closes its open slot long after the unit has emitted past it, so its
    ``raw_wm`` must stay at that slot (the unit's emission limit would be a promise broken by the close)."""
    from workers.debs import PLAYER_SENSORS, PS_PER_S, sensor_stream

    spec = load_workflow(WORKFLOW).worker("Average team A")
    players = list(spec.params["players"][:2])
    silent = {sensor_stream(sid) for sid in PLAYER_SENSORS[players[0]]}
    params = {**spec.params, "players": players, "min_k": 300 * 10**9}  # settling trails emission by 300 ms
    component = build_component(spec.type, params, list(spec.inputs), buffer_size=BUFFER_SIZE,
                                ordering={"mode": "speculative", "alpha": 0})
    assert isinstance(component, OrderedComponent)
    start = min(streams[name][0]["ts"] for name in component.ctx.inputs if streams.get(name))
    dropout = (start + PS_PER_S, start + 2 * PS_PER_S)
    inputs = {name: [e for e in streams.get(name, []) if name not in silent or not dropout[0] <= e["ts"] < dropout[1]]
              for name in component.ctx.inputs}
    assert silent <= set(inputs) and all(inputs[name] for name in silent)
    outputs = {name: component.ctx.outputs[name] for name in players}
    promised: dict[str, int | None] = dict.fromkeys(players)
    read_to = dict.fromkeys(players, -1)
    generations = {name: out.retractions for name, out in outputs.items()}
    ahead: set[str] = set()  # players whose raw_wm was ever ahead of their settled wm
    lagged = False  # the silent player's raw_wm was ever behind the other's
    rng = random.Random(3)
    at = dict.fromkeys(inputs, 0)
    step, steps, checked = start + STEP_PS, 0, 0
    while any(at[n] < len(evs) for n, evs in inputs.items()):
        steps += 1
        for name, evs in inputs.items():
            j = at[name]
            while j < len(evs) and evs[j]["ts"] < step:
                j += 1
            batch = [dict(e) for e in evs[at[name]:j]]
            at[name] = j
            # Late events (in front of the AEP) in every fourth step: a replay withdraws what it does not
            # emit again, which takes the promise with it, so the other steps are where it is checked.
            held = [e for e in batch if steps % 4 == 0 and rng.random() < 0.02]
            component.feed(name, [e for e in batch if all(e is not h for h in held)])
            if held:
                component.feed(name, held)
            component._handle(component.unit.promise(name, step - 1))
        component._publish_meta(force=True)
        for name, out in outputs.items():
            notice = out.retract_notice(generations[name])
            if notice is not None:  # a retraction: the promise goes with it, and the reader reads again after it
                generations[name] = notice["generation"]
                promised[name] = None
                read_to[name] = min(read_to[name], notice["after"])
            page = out.buffer.read(read_to[name], oldest=out.buffer.capacity)
            for item in page.items:
                ts = orjson.loads(item)["ts"]
                assert promised[name] is None or ts > promised[name], (name, ts, promised[name])
                checked += promised[name] is not None
            if page.items:
                read_to[name] = page.indices[-1]
            progress = out.progress
            assert progress.raw_wm is None or progress.wm is None or progress.raw_wm >= progress.wm
            promised[name] = progress.raw_wm
            if progress.raw_wm is not None and progress.wm is not None and progress.raw_wm > progress.wm:
                ahead.add(name)
        quiet, busy = (outputs[p].progress.raw_wm for p in players)
        lagged = lagged or (quiet is not None and busy is not None and quiet < busy - PS_PER_S // 2)
        step += STEP_PS
    assert ahead == set(players)
    assert lagged
    assert checked > 100  # tuples that came while a promise stood
    assert component.unit.metrics()["speculation"]["replays"] > 0
