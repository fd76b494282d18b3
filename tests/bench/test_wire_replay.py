"""A full-game replay records the same bytes whether peers exchange Arrow or JSON pages (issue 13, item 1).

The 3-peer workflow pulls across peers over HTTP; ``PAN_WIRE=json`` (pan/arrow_pages.py) makes every
process of the second replay serve and ask for JSON only, so the two runs differ only in the wire format.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.query_delay import plain_split
from pan.arrow_pages import WIRE_ENV, available
from tests.bench.test_load_independence import outputs, replay
from tests.conftest import ROOT

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(2400),
    pytest.mark.skipif(not available(), reason="needs pyarrow (the extra 'arrow')"),
]


def test_outputs_are_byte_identical_over_arrow_and_over_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    subprocess.run([sys.executable, "-m", "pan", "generate", "--minutes", "0.5", "--seed", "13", "--out",
                    str(tmp_path / "game")], cwd=ROOT, check=True, capture_output=True, timeout=300)
    data = plain_split(tmp_path / "game", tmp_path / "split")

    monkeypatch.delenv(WIRE_ENV, raising=False)
    replay(data, tmp_path / "arrow")
    monkeypatch.setenv(WIRE_ENV, "json")
    replay(data, tmp_path / "json")

    over_arrow, over_json = outputs(tmp_path / "arrow"), outputs(tmp_path / "json")
    assert over_arrow["BALLHITS"] and over_arrow["BP_wholeGame_A"] and len(over_arrow) > 300
    assert over_arrow.keys() == over_json.keys()
    different = [name for name in over_arrow if over_arrow[name] != over_json[name]]
    assert not different, different[:10]
