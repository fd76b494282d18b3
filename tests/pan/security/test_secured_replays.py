"""A secured workflow records what the open one does (issue 14, acceptance): a whole `pan replay` of a
generated match with a secret, over TLS (certificates from `pan certs`), and with two repositories of which
one is SIGKILLed mid-feed records every output stream byte for byte as the plain replay of the same match,
and misses nothing.

The workflow is workflows/full_game_3_peers.json, which is enough: it runs every query of the full game
(ordered components among them, so a reordered or lost tuple changes bytes) in three peers that pull from
each other over HTTP, so hops across peers carry the read token or TLS, and the recorder finds every output
through a repository. One match (the 5.5 s around the first shot of a short exact match, as
tests/bench/test_wire_replay.py prepares it: every query family has output) and one plain reference replay
serve every variant. On 2 cores the file took 3 minutes at load 9-12 and 1.5 minutes at load 2 (the match
and the reference ~20-40 s, each variant one replay of 15-30 s).
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest

from pan.launch.lifeline import shared_lifeline
from pan.workflow.parser import on_free_ports
from tests.bench.test_wire_replay import ATTEMPTS, empty_families, outputs, port_clash, replay, shot_window_split
from tests.conftest import HOST, ROOT, get_json, wait_until
from tests.pan.repository.test_replicas import children_of

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

WORKFLOW = ROOT / "workflows" / "full_game_3_peers.json"
FED = "SENSOR4"  # a ball's stream: the input the feed sends (and the recorder records) the most of


@pytest.fixture(scope="module")
def match(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shot_window_split(tmp_path_factory.mktemp("secured"))


@pytest.fixture(scope="module")
def reference(match: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """What the plain workflow records: every query family has output, so no comparison passes on empty files."""
    out = tmp_path_factory.mktemp("reference") / "out"
    replay(plain(), match, out)
    recorded = outputs(out)
    assert not empty_families(recorded), empty_families(recorded)
    return recorded


def plain() -> dict[str, Any]:
    return json.loads(WORKFLOW.read_text())


def assert_same_outputs(recorded: dict[str, bytes], expected: dict[str, bytes]) -> None:
    assert recorded.keys() == expected.keys()
    assert [name for name in expected if recorded[name] != expected[name]] == []


def test_with_a_secret_the_replay_records_the_same_bytes(match: Path, reference: dict[str, bytes],
                                                         tmp_path: Path) -> None:
    (tmp_path / "pan.secret").write_text("the secret every peer of this replay shares\n")
    replay({**plain(), "auth": {"secret_file": str(tmp_path / "pan.secret")}}, match, tmp_path / "out")
    assert_same_outputs(outputs(tmp_path / "out"), reference)


def test_over_tls_the_replay_records_the_same_bytes(match: Path, reference: dict[str, bytes],
                                                    tmp_path: Path) -> None:
    made = subprocess.run([sys.executable, "-m", "pan", "certs", HOST, "--out", str(tmp_path / "certs")],
                          cwd=ROOT, capture_output=True, text=True, timeout=180, check=False)
    assert made.returncode == 0, made.stderr
    replay({**plain(), "tls": json.loads(made.stdout)}, match, tmp_path / "out")
    assert_same_outputs(outputs(tmp_path / "out"), reference)


@pytest.fixture
async def background() -> AsyncIterator[list[asyncio.subprocess.Process]]:
    """Processes a test starts and must not leave behind, whatever happens to it."""
    started: list[asyncio.subprocess.Process] = []
    yield started
    for process in started:
        if process.returncode is None:
            process.kill()
            await asyncio.wait_for(process.wait(), 60)


class FeedProgress:
    """How many tuples of a fed stream its forwarder has appended, from the forwarder's ``/metrics``."""

    def __init__(self, workflow: dict[str, Any], stream: str) -> None:
        (forwarder,) = [w for w in workflow["workers"] if stream in w["params"].get("inter_pan_inputs", [])]
        self.url = f"http://{forwarder['host']}:{forwarder['port']}/metrics"
        self.sample = re.compile(rf'^pan_output_appended_total{{[^}}]*stream="{stream}"[^}}]*}} (\S+)$', re.M)
        self.appended = 0

    async def reached(self, count: int) -> bool:
        try:
            status, text = await get_json(self.url)
        except (aiohttp.ClientError, TimeoutError):
            return False  # not up yet
        found = self.sample.search(text) if status == 200 and isinstance(text, str) else None
        self.appended = int(float(found.group(1))) if found else self.appended
        return self.appended >= count


async def start_replay(workflow: dict[str, Any], data: Path, tmp_path: Path,
                       background: list[asyncio.subprocess.Process]) -> asyncio.subprocess.Process:
    """`pan replay --json` of ``workflow`` in the background, paced in real time: its report in ``report.json``,
    its errors in ``replay.log``, its recording in ``out``. Paced, the feed of the 5.5 s match lasts 5.5 s, so a
    test can act in the middle of it; unpaced, it could end between two looks at the forwarder's counters (in
    a CI run, the look that first found a tenth of the ball's 11,001 rows found all of them). The outputs do not
    depend on the pace (event time)."""
    path = tmp_path / "workflow.json"
    path.write_text(json.dumps(workflow))
    shutil.rmtree(tmp_path / "out", ignore_errors=True)
    with (tmp_path / "report.json").open("wb") as report, (tmp_path / "replay.log").open("wb") as log:
        running = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "pan", "replay", "--json", "--speedup", "1", str(path), "--data", str(data),
            "--record", str(tmp_path / "out"), cwd=ROOT, stdout=report, stderr=log,
            **shared_lifeline().spawn_options())  # a killed pytest leaves no replay behind
    background.append(running)
    return running


@pytest.mark.parametrize("killed", [0, 1], ids=["first", "second"])
async def test_killing_either_of_two_repositories_mid_replay_changes_no_output(
        match: Path, reference: dict[str, bytes], tmp_path: Path, killed: int,
        background: list[asyncio.subprocess.Process]) -> None:
    first = plain()["repository"]
    out, total = tmp_path / "out", reference[FED].count(b"\n")
    for _ in range(ATTEMPTS):
        workflow = on_free_ports({**plain(), "repository": [first, {**first, "port": 1}]})  # both moved
        running = await start_replay(workflow, match, tmp_path, background)
        progress = FeedProgress(workflow, FED)
        # Mid-feed: a tenth of the ball's stream is in (the feed keeps every stream within a slice of event time).
        await wait_until(lambda replay=running, fed=progress: replay.returncode is not None or fed.reached(total // 10),
                         timeout_s=600, interval_s=0.05)
        if not port_clash(running.returncode, (tmp_path / "replay.log").read_text()):
            break
    assert running.returncode is None, "the replay ended before the kill: " + (tmp_path / "replay.log").read_text()
    (run,) = [p for p in psutil.Process(running.pid).children() if "run" in p.cmdline()]
    port = workflow["repository"][killed]["port"]
    children_of(run)[f"repository {port}"].send_signal(signal.SIGKILL)
    assert progress.appended < total, "the feed had ended before the kill"

    assert await asyncio.wait_for(running.wait(), 1200) == 0, (tmp_path / "replay.log").read_text()[-3000:]
    done = json.loads((tmp_path / "report.json").read_text())
    assert done["missed"] == {} and not done["feed_errors"], done
    assert_same_outputs(outputs(out), reference)
