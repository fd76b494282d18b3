"""`pan bench fullgame`: the whole pipeline (generate, Spark split, replay) on half a minute of match, its report
section and figures; a disk too small for the run and an interrupted run; the recording per minute of play does not
depend on the match's length."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import psutil
import pytest

from benchmarks import fullgame_bench, fullgame_measure, results
from pan.launch.lifeline import shared_lifeline
from pan.workflow.parser import load_workflow
from simulator import disk_space
from simulator.replay import output_streams

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "workflows" / "full_game_3_peers.json"
PAN = [sys.executable, "-m", "pan"]


def bench(folder: Path, *argv: str) -> dict[str, Any]:
    """The results of one `pan bench fullgame` run with ``argv``, in ``folder``, that must succeed."""
    done = subprocess.run([*PAN, "bench", "fullgame", *argv], cwd=folder, capture_output=True, timeout=900,
                          check=False, **shared_lifeline().spawn_options())  # a killed pytest leaves no benchmark
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return orjson.loads(done.stdout)


@pytest.mark.process
def test_half_a_minute_through_every_phase_writes_its_section(tmp_path: Path) -> None:
    report = tmp_path / "b.md"
    summary = bench(tmp_path, "--minutes", "0.5", "--reps", "1", "--report", str(report))
    text = report.read_text()
    assert "<!-- fullgame:start -->" in text and "<!-- fullgame:end -->" in text
    assert "| `replay` |" in text and "| `pan peer peer1` |" in text and "| HM |" in text
    assert "`pan replay --compress`" in text and "| MB on disk (zstd) | MB of JSON |" in text
    phases = summary["phases"]
    assert list(phases) == ["generate", "split", "replay"]
    for name, phase in phases.items():
        assert phase["wall_s"]["median"] > 0 and phase["rows_per_s"]["median"] > 0, name
        assert any(p["peak_rss_mb"]["median"] > 0 for p in phase["processes"].values()), name
    assert "pan split (Spark driver)" in phases["split"]["processes"]
    recording = phases["replay"]["recording"]
    assert recording["families"]["HM"]["bytes"]["median"] > 0 and recording["families"]["BP"]["bytes"]["median"] > 0
    sensors = recording["families"]["SENSOR"]
    assert 0 < sensors["bytes"]["median"] < sensors["json_bytes"]["median"]  # compressed
    assert sensors["bytes_per_min"]["median"] == pytest.approx(2 * sensors["bytes"]["median"], rel=1e-3)
    assert recording["json_bytes"]["median"] == sum(f["json_bytes"]["median"] for f in recording["families"].values())
    streams = len(output_streams(load_workflow(WORKFLOW)))
    assert recording["streams"]["median"] == summary["streams_expected"] == streams
    assert summary["config"]["game_s"] == 30.0 and summary["runs"][0]["rows"] > 0
    assert not list(tmp_path.glob("pan-fullgame-*"))  # its working folder is gone


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    fullgame_bench.add_arguments(parser)
    results.add_max_load_argument(parser)
    return parser.parse_args(list(argv))


def test_a_disk_too_small_is_refused_before_anything_starts(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "work"
    asked: list[Path] = []

    def small_disk(path: Path) -> int:
        asked.append(path)
        return 2 * 10**9

    assert fullgame_bench.run(parsed("--out", str(out)), free=small_disk) == 2  # a whole match: ~19 GB
    err = capsys.readouterr().err
    assert asked == [out.resolve()] and not out.exists()
    whole = fullgame_measure.needed_bytes(fullgame_bench.game_seconds(None) + 4 * fullgame_bench.LEAD_S)
    assert err == (f"pan bench fullgame: the run (the generated CSV, its split and the replay's compressed recording) "
                   f"needs about {whole / 1e9:.1f} GB, but {out.resolve()} has 2.0 GB free: free some space or choose "
                   "another folder\n")
    csv = disk_space.generated_bytes(fullgame_bench.game_seconds(None) + 20)
    assert (1 + disk_space.SPLIT_FACTOR) * csv < whole < (1 + disk_space.SPLIT_FACTOR) * csv + 5e9  # recording ~3 GB
    assert 15e9 < whole < 25e9 and fullgame_measure.needed_bytes(50) < 1e9


def test_processes_and_streams_are_named_for_the_tables() -> None:
    name = fullgame_measure.process_name
    assert name([sys.executable, "-m", "pan", "peer", "wf.json", "--name", "peer1"]) == "pan peer peer1"
    assert name([sys.executable, "-m", "pan", "split", "x", "--out", "y"]) == "pan split (Spark driver)"
    assert name([sys.executable, "-m", "pan", "replay", "wf.json"]) == "pan replay (simulator and recorder)"
    assert name(["/usr/lib/jvm/bin/java", "-cp", "x"]) == "Spark JVM (java)"
    assert name(["python3", "-m", "pyspark.daemon"]) == "Spark python worker"
    family = fullgame_measure.stream_family
    assert [family(s) for s in ("HM_1min_8x13_A1", "RUNAGG_A1_5min", "RUN_B1_late", "BP_wholeGame_A", "BALLHITS",
                                "SHOTS_late", "A1", "B8_late", "SENSOR105")] == [
        "HM", "RUNAGG", "RUN", "BP", "BALLHITS", "SHOTS", "player averages", "player averages", "SENSOR"]


def is_java(process: psutil.Process) -> bool:
    try:
        return "java" in process.name()
    except psutil.Error:  # ended meanwhile
        return False


@pytest.mark.process
def test_an_interrupted_run_stops_its_children_and_removes_its_files(tmp_path: Path) -> None:
    work = tmp_path / "work"
    bench = subprocess.Popen([*PAN, "bench", "fullgame", "--minutes", "0.5", "--reps", "1", "--out", str(work)],
                             cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             **shared_lifeline().spawn_options())
    try:
        me = psutil.Process(bench.pid)
        children: list[psutil.Process] = []
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not any(is_java(p) for p in children):
            time.sleep(0.2)  # until Spark's JVM runs: the split phase, the benchmark's children's children
            children = me.children(recursive=True)
        assert any(is_java(p) for p in children), "the split never started"
        bench.send_signal(signal.SIGTERM)
        _, err = bench.communicate(timeout=120)
    finally:
        bench.kill()
    assert bench.returncode == 130 and b"pan bench fullgame: interrupted (SIGTERM)" in err, err[-2000:]
    assert b"Traceback" not in err
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, [p.cmdline() for p in alive]
    assert not work.exists()


#: Stream families this large (bytes on disk, in the longer run) are compared per minute of play.
COMPARED_FROM = 1e6
#: How far apart the two runs' bytes per minute of play may be.
PER_MINUTE_FACTOR = 1.5


@pytest.mark.heavy
@pytest.mark.timeout(1800)
def test_the_recording_per_minute_of_play_does_not_depend_on_the_matchs_length(tmp_path: Path) -> None:
    """0.5 and 1.5 minutes of play record about as many bytes per minute in every family above 1 MB.

    Why a factor 1.5, not 1: the leads (5 s of rows before and after each half) are the same in both runs, so they
    weigh three times as much per minute of the shorter one, and the whole-game maps (`HM_wholeGame_*`) grow with
    the cells a player has covered, more slowly than the minutes. What the test is for is a volume that depends
    on the length of the half or of the match: the old dense heat maps, emitted from kick-off for every second of
    the 30-minute first half, differed by about 30x between these two lengths; such a dependence shows as 10x or
    more.
    """
    short = bench(tmp_path, "--minutes", "0.5", "--reps", "1")["phases"]["replay"]["recording"]["families"]
    long = bench(tmp_path, "--minutes", "1.5", "--reps", "1")["phases"]["replay"]["recording"]["families"]
    compared = {family: (short[family]["bytes_per_min"]["median"], f["bytes_per_min"]["median"])
                for family, f in long.items() if f["bytes"]["median"] > COMPARED_FROM}
    assert {"SENSOR", "HM"} <= set(compared), long
    apart = {family: (a, b) for family, (a, b) in compared.items()
             if not 1 / PER_MINUTE_FACTOR <= b / a <= PER_MINUTE_FACTOR}
    assert not apart, f"bytes per minute of play, 0.5 against 1.5 minutes: {apart}"
