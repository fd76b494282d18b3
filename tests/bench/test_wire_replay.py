"""A generated match records the same bytes whether peers exchange Arrow or JSON pages, on 3 and 14 peers
(issue 13, acceptance).

Each workflow is replayed twice, with `pan replay --wire json` and `--wire arrow`: every process of the
run (the recorder, `pan run` and every peer) gets ``PAN_WIRE`` (pan/wire/arrow_pages.py), so the two runs differ
only in the wire format. The 3-peer workflow pulls across its peers over HTTP; with 14 peers every worker
pulls every input over HTTP, so nearly every hop is a page in the chosen format.

The match is short, to keep CI's time: 15 s of play from the exact generator, of which the replay feeds
the 5.5 s around the first shot (so Q4 has an answer); on a 2-core machine at load 10-16 the 14-peer case
took 3.3 minutes with 7 s of it. Every query family must have output, so the comparison cannot pass on
empty files.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.query_delay import plain_split
from pan.launch.lifeline import shared_lifeline
from pan.wire.arrow_pages import available
from pan.workflow.parser import on_free_ports
from tests.conftest import ROOT

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(2400),
    pytest.mark.skipif(not available(), reason="needs pyarrow (the extra 'arrow')"),
]

PS = 10**12
SEED = "53"  # its first 15 s of play hold a shot (truth/shots.csv): checked below, not assumed
FEED_BEFORE_SHOT_S = 3.5
FEED_AFTER_SHOT_S = 2.0  # the shot's path is judged within 1.5 s
#: Every query family of the full game, by the names of its output streams (README, "Output streams").
FAMILIES = {
    "player average": r"(A[1-8]|B[1-8]|REFEREE)",
    "active ball": r"ACTIVEBALL",
    "Q1 current running": r"RUN_.+",
    "Q1 aggregate": r"RUNAGG_.+",
    "Q2 hits": r"BALLHITS",
    "Q2 players' possession": r"BP_(A[1-8]|B[1-8])",
    "Q2 teams' possession": r"BP_[0-9a-zA-Z]+_[AB]",
    "Q3 heat map": r"HM_.+",
    "Q4 shots": r"SHOTS",
}


@pytest.fixture(scope="module")
def match(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shot_window_split(tmp_path_factory.mktemp("wire"))


def shot_window_split(root: Path) -> Path:
    """A split folder in ``root``: the rows from a few seconds before the first shot of a short generated match
    until just after it."""
    game = root / "game"
    subprocess.run([sys.executable, "-m", "pan", "generate", "--exact", "--minutes", "0.25", "--lead", "1",
                    "--seed", SEED, "--out", str(game)], cwd=ROOT, check=True, capture_output=True, timeout=300)
    shots = (game / "truth" / "shots.csv").read_text().splitlines()[1:]
    assert shots, "the generated match has no shot: pick another seed"
    shot_ps = int(shots[0].split(",")[1])
    return plain_split(game, game.parent / "split", until_ts=shot_ps + int(FEED_AFTER_SHOT_S * PS),
                       since_ts=shot_ps - int(FEED_BEFORE_SHOT_S * PS))


#: A port chosen free may be taken (by any outgoing connection of a busy machine) before a peer binds it.
PORT_CLASH = "address already in use"
ATTEMPTS = 3


def port_clash(returncode: int | None, stderr: str) -> bool:
    """The replay stopped because a peer could not bind its port: worth another try on other free ports."""
    return returncode not in (None, 0) and PORT_CLASH in stderr


def replay(workflow: str | dict, data: Path, out: Path, wire: str = "json") -> dict:
    """`pan replay` of a shipped workflow (by name) or of a workflow description, moved to free ports (again,
    should a port be taken before its peer binds it)."""
    if isinstance(workflow, str):
        workflow = json.loads((ROOT / "workflows" / workflow).read_text())
    path = out.parent / f"{out.name}-workflow.json"
    for _ in range(ATTEMPTS):
        shutil.rmtree(out, ignore_errors=True)
        path.write_text(json.dumps(on_free_ports(workflow)))
        done = subprocess.run(
            [sys.executable, "-m", "pan", "replay", "--json", str(path), "--data", str(data), "--record", str(out),
             "--wire", wire],
            cwd=ROOT, capture_output=True, timeout=1500, check=False,
            **shared_lifeline().spawn_options(),  # a killed pytest leaves no replay behind
        )
        if not port_clash(done.returncode, done.stderr.decode()):
            break
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    report = json.loads(done.stdout)
    assert report["missed"] == {} and not report["feed_errors"], report
    assert report["wire"] == wire  # the recorder itself read this format
    return report


def outputs(record: Path) -> dict[str, bytes]:
    return {p.stem: p.read_bytes() for p in sorted(record.glob("*.jsonl"))}


def empty_families(recorded: dict[str, bytes]) -> list[str]:
    """The query families none of whose streams recorded a tuple."""
    return [family for family, pattern in FAMILIES.items()
            if not any(data for name, data in recorded.items() if re.fullmatch(pattern, name))]


def test_every_family_pattern_names_streams_the_readme_lists() -> None:
    readme = (ROOT / "README.md").read_text()
    for name in ("ACTIVEBALL", "BALLHITS", "SHOTS", "RUN_<player>", "RUNAGG_<window>_<player>", "BP_<player>",
                 "BP_<window>_<team>", "HM_<window>_<nx>x<ny>_<player>"):
        assert f"`{name}`" in readme
    assert empty_families({"A1": b"x"}) == [f for f in FAMILIES if f != "player average"]
    assert "Q2 players' possession" in empty_families({"BP_wholeGame_A": b"x"})


@pytest.mark.parametrize("workflow", [
    "full_game_3_peers.json", pytest.param("full_game_14_peers.json", marks=pytest.mark.heavy),
])
def test_outputs_are_byte_identical_over_arrow_and_over_json(workflow: str, match: Path, tmp_path: Path) -> None:
    replay(workflow, match, tmp_path / "json", "json")
    replay(workflow, match, tmp_path / "arrow", "arrow")

    over_json, over_arrow = outputs(tmp_path / "json"), outputs(tmp_path / "arrow")
    assert len(over_json) > 300
    assert not empty_families(over_json), empty_families(over_json)
    assert over_arrow.keys() == over_json.keys()
    different = [name for name in over_json if over_arrow[name] != over_json[name]]
    assert not different, different[:10]


def test_a_closed_replicated_workflow_records_the_same_bytes(match: Path, tmp_path: Path) -> None:
    """Issue 14: a secret (signed leases, read tokens), TLS everywhere, two repositories and an allow-list change
    nothing a replay records."""
    from pan.security.tls import make_certificates

    open_workflow = json.loads((ROOT / "workflows" / "full_game_3_peers.json").read_text())
    replay(open_workflow, match, tmp_path / "open")
    certs = make_certificates(tmp_path / "certs", ["127.0.0.1"])
    (tmp_path / "pan.secret").write_text("a secret shared by every peer of this test\n")
    closed = {**open_workflow,
              "repository": [open_workflow["repository"], {**open_workflow["repository"], "port": 1}],
              "auth": {"secret_file": str(tmp_path / "pan.secret")},
              "tls": {"ca": str(certs.ca), "cert": certs.cert, "key": certs.key},
              "allowed_hosts": "workflow"}
    replay(closed, match, tmp_path / "closed")
    recorded, expected = outputs(tmp_path / "closed"), outputs(tmp_path / "open")
    assert not empty_families(expected) and recorded.keys() == expected.keys()
    assert [name for name in expected if recorded[name] != expected[name]] == []

