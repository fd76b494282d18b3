"""`pan bench floor` computes what the workflow computes: its outputs equal a real replay's, stream by stream,
on the components' array path (the default) and on their per-event path."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from benchmarks.floor_bench import run_chain
from benchmarks.query_delay import plain_split
from pan.components.chain import ComponentChain
from pan.components.testing import OutputReader
from pan.launch.lifeline import shared_lifeline
from pan.workflow.parser import on_free_ports
from simulator.debs import HALF1
from tests.conftest import ROOT

pytestmark = [pytest.mark.process, pytest.mark.timeout(1800)]

WORKFLOW = ROOT / "workflows" / "full_game_3_peers.json"
STEP_PS = 50 * 10**9


def pan(*args: str, cwd: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "pan", *args], cwd=cwd, capture_output=True, timeout=1500,
                          check=False, **shared_lifeline().spawn_options())  # a killed pytest leaves nothing behind
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return done.stdout.decode()


class Collector:
    """Per component output of a chain: how many tuples it gained, step after step, and a digest of them as a
    recorder writes them (one JSON line each; a whole match's heat maps would not fit in memory as objects)."""

    def __init__(self) -> None:
        self.readers: dict[str, OutputReader] = {}
        self.counts: dict[str, int] = {}
        self.digests: dict[str, Any] = {}

    def __call__(self, chain: ComponentChain) -> None:
        if not self.readers:
            self.readers = {name: OutputReader(component, name) for component in chain.components().values()
                            for name in component.ctx.outputs}
            self.counts = dict.fromkeys(self.readers, 0)
            self.digests = {name: hashlib.sha256() for name in self.readers}
        for name, reader in self.readers.items():
            new = reader.new()
            assert reader.missed == 0, name
            self.counts[name] += len(new)
            self.digests[name].update(b"".join(orjson.dumps(t) + b"\n" for t in new))


def recorded(record: Path, stream: str) -> tuple[int, str]:
    """(tuples, digest) of a stream the replay recorded; (0, digest of nothing) when it recorded none."""
    path = record / f"{stream}.jsonl"
    data = path.read_bytes() if path.is_file() else b""
    return data.count(b"\n"), hashlib.sha256(data).hexdigest()


def test_the_floor_outputs_equal_a_replay(tmp_path: Path) -> None:
    # The first half only: stepping the chain through the half-time break (half an hour of event time in
    # 50 ms steps, every output read after each) took most of this test's 7 minutes in CI.
    pan("generate", "--minutes", "0.5", "--seed", "11", "--out", "game", cwd=tmp_path)
    split = plain_split(tmp_path / "game", tmp_path / "split", until_ts=HALF1[1])
    workflow = tmp_path / "workflow.json"
    workflow.write_text(json.dumps(on_free_ports(json.loads(WORKFLOW.read_text()))))
    report = json.loads(pan("replay", "--json", str(workflow), "--data", str(split), "--record", "record",
                            cwd=tmp_path))
    assert report["missed"] == {} and not report["feed_errors"], report

    collected = Collector()
    # Small steps: the collector reads each output after every step, and heat maps keep only 120 tuples.
    _chain, rows, _seconds = run_chain(workflow, split, on_step=collected, step_ps=STEP_PS)
    assert rows == report["sent"]  # every row the replay sent, and nothing else
    counts = collected.counts
    assert sum(counts.values()) > 10_000 and all(counts[s] > 0 for s in ("A1", "BALLHITS", "BP_wholeGame_A"))
    floor = {name: (counts[name], digest.hexdigest()) for name, digest in collected.digests.items()}
    replayed = {name: recorded(tmp_path / "record", name) for name in floor}
    different = {name: (floor[name][0], replayed[name][0]) for name in floor if floor[name] != replayed[name]}
    assert not different, f"{len(different)} of {len(floor)} streams differ (floor, replay tuples): {different}"

    per_event = Collector()  # the components' per-event path: the same tuples, byte for byte
    run_chain(workflow, split, on_step=per_event, step_ps=STEP_PS, arrays=False)
    slow = {name: (per_event.counts[name], digest.hexdigest()) for name, digest in per_event.digests.items()}
    different = [name for name in floor if floor[name] != slow[name]]
    assert slow.keys() == floor.keys() and not different, f"the per-event path differs on {different}"
