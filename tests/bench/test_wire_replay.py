"""A full-game replay records the same bytes whether peers exchange Arrow or JSON pages (issue 13, item 1).

The 3-peer workflow pulls across peers over HTTP. ``PAN_WIRE=arrow`` (pan/arrow_pages.py) makes every
process of the second replay ask for Arrow pages, so the two runs differ only in the wire format; the
replay's recorders read over the same wire. The first half of a generated match is enough: every query
has output there, and the break between the halves would only add heartbeats.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.ordering_modes import first_half
from pan.arrow_pages import WIRE_ENV, available
from tests.bench.test_load_independence import outputs, replay
from tests.conftest import ROOT

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(2400),
    pytest.mark.skipif(not available(), reason="needs pyarrow (the extra 'arrow')"),
]


def test_outputs_are_byte_identical_over_arrow_and_over_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    subprocess.run([sys.executable, "-m", "pan", "generate", "--minutes", "1", "--seed", "13", "--out",
                    str(tmp_path / "game")], cwd=ROOT, check=True, capture_output=True, timeout=300)
    data = first_half(tmp_path / "game", tmp_path / "split")

    monkeypatch.setenv(WIRE_ENV, "json")
    replay(data, tmp_path / "json")
    monkeypatch.setenv(WIRE_ENV, "arrow")
    replay(data, tmp_path / "arrow")

    over_json, over_arrow = outputs(tmp_path / "json"), outputs(tmp_path / "arrow")
    assert over_json["BALLHITS"] and over_json["BP_wholeGame_A"] and len(over_json) > 300
    assert over_arrow.keys() == over_json.keys()
    different = [name for name in over_json if over_arrow[name] != over_json[name]]
    assert not different, different[:10]
