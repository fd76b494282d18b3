"""`pan split`: per-sensor files from a full-game CSV, with real local Spark.

One SparkSession serves the whole test session (the job reuses it through
``getOrCreate``), so the JVM starts once.
"""

from __future__ import annotations

import json
import random
import stat
from collections import defaultdict
from pathlib import Path

import pytest

from pan.cli import main
from pan.offline.spark import SparkUnavailable, get_session, java_major_version

pytestmark = pytest.mark.process  # every test here starts OS processes

MALFORMED = [
    "garbage",
    "1,2,3",
    "",
    "4,abc,1,1,1,1,1,1,1,1,1,1,1",
    "sid,ts,x,y,z,|v|,|a|,vx,vy,vz,ax,ay,az",
    "4,10753295594424116,1,1,1,1,1,1,1,1,1,1,1,99",
    "8,1.5e16,1,1,1,1,1,1,1,1,1,1,1",
]

# Rows in the real file's style (negative coordinates, large |a|), some with CRLF endings.
REAL_STYLE = """\
67,10753295594424116,-3213,27478,-192,1060,2187284,-2883,-6143,7345,-1216,-5762,8082
4,10753295607186428,26679,-580,211,0,0,0,0,0,0,0,0
67,10753300594424116,-3208,27483,-190,1200,2011000,-2800,-6100,7400,-1200,-5700,8100\r
105,10753295596424116,26300,-4200,180,800000,1500000,6000,8000,0,0,10000,0
4,10753295606686428,26679,-580,211,0,0,0,0,0,0,0,0
"""


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gen")
    assert main(["generate", "--minutes", "0.1", "--seed", "3", "--out", str(out)]) == 0
    return out


def _by_sensor(lines: list[str]) -> dict[int, list[str]]:
    rows: dict[int, list[str]] = defaultdict(list)
    for line in lines:
        rows[int(line.split(",", 1)[0])].append(line)
    return rows


def _ts(line: str) -> int:
    return int(line.split(",")[1])


def test_split_matches_input_per_sensor(spark: object, generated: Path, tmp_path: Path) -> None:
    lines = (generated / "full-game").read_text().splitlines()
    random.Random(1).shuffle(lines)  # Spark, not the input order, must sort
    mixed = list(lines)
    for i, bad in enumerate(MALFORMED):
        mixed.insert(i * 997, bad)
    src = tmp_path / "in" / "full-game"
    src.parent.mkdir()
    src.write_text("\n".join(mixed) + "\n")
    (src.parent / "interruptions.csv").write_bytes((generated / "interruptions.csv").read_bytes())
    out = tmp_path / "out"

    assert main(["split", str(src), "--out", str(out)]) == 0

    manifest = json.loads((out / "manifest.json").read_text())
    expected = _by_sensor(lines)
    assert manifest["rejected"] == len(MALFORMED)
    assert set(manifest["rejected_examples"]) <= set(MALFORMED)
    assert manifest["rows"] == len(lines)
    assert set(map(int, manifest["sensors"])) == set(expected)
    assert sorted(p.name for p in out.glob("SENSOR*.csv")) == sorted(f"SENSOR{s}.csv" for s in expected)
    for sid, rows in expected.items():
        got = (out / f"SENSOR{sid}.csv").read_text().splitlines()
        assert sorted(got) == sorted(rows)
        stamps = [_ts(r) for r in got]
        assert stamps == sorted(stamps)
        entry = manifest["sensors"][str(sid)]
        assert entry == {"file": f"SENSOR{sid}.csv", "rows": len(rows), "first_ts": stamps[0], "last_ts": stamps[-1]}
    assert (out / "interruptions.csv").read_bytes() == (generated / "interruptions.csv").read_bytes()
    assert manifest["interruptions"] == "interruptions.csv"
    assert not (out / "_spark_out").exists()


def test_split_real_format_fixture_with_malformed_rows(spark: object, tmp_path: Path) -> None:
    src = tmp_path / "full-game"
    src.write_bytes((REAL_STYLE + "67,oops\n\n4,1,2\n").encode())
    out = tmp_path / "out"
    assert main(["split", str(src), "--out", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["rejected"] == 3 and manifest["rows"] == 5
    assert manifest["interruptions"] is None and not (out / "interruptions.csv").exists()
    ball = (out / "SENSOR4.csv").read_text().splitlines()
    assert [_ts(r) for r in ball] == [10753295606686428, 10753295607186428]
    player = (out / "SENSOR67.csv").read_text().splitlines()
    assert player[1] == "67,10753300594424116,-3208,27483,-190,1200,2011000,-2800,-6100,7400,-1200,-5700,8100"
    assert manifest["sensors"]["105"]["rows"] == 1


def test_split_missing_input_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["split", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "out")]) == 2
    assert "pan split: input not found" in capsys.readouterr().err  # errors go to stderr, output to stdout


def test_old_java_is_rejected_with_a_clear_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    java = tmp_path / "bin" / "java"
    java.parent.mkdir()
    java.write_text('#!/bin/sh\necho \'openjdk version "11.0.2" 2019-01-15\' >&2\n')
    java.chmod(java.stat().st_mode | stat.S_IEXEC)
    assert java_major_version(str(java)) == 11
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(SparkUnavailable, match="Java 17"):
        get_session()
