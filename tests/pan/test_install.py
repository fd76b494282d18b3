"""`pip install .` (not editable) into a fresh venv: the runtime works anywhere without the extras.

The core depends on aiohttp, orjson and numpy only; Spark, the benchmark tools and the test tools are
extras, and the benchmarks themselves a distribution of their own (benchmarks/pyproject.toml). Slow: it
builds and installs PAN from the registry like `make test` does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pan.lifeline import shared_lifeline
from pan.workflow import on_free_ports
from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def fresh_pan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", str(ROOT)], check=True, timeout=900,
                   cwd=venv, capture_output=True)
    return venv / "bin"


def test_the_core_installs_without_the_extras(fresh_pan: Path) -> None:
    for module in ("pyspark", "redis", "matplotlib", "psutil"):
        found = subprocess.run([str(fresh_pan / "python"), "-c", f"import {module}"], capture_output=True)
        assert found.returncode != 0, f"{module} was installed with the core"


def test_the_benchmarks_are_not_part_of_the_runtime(fresh_pan: Path, tmp_path: Path) -> None:
    found = subprocess.run([str(fresh_pan / "python"), "-c", "import benchmarks"], cwd=tmp_path, capture_output=True,
                           env={**os.environ, "PYTHONPATH": ""})
    assert found.returncode != 0, "a plain install of PAN has a benchmarks package"
    done = subprocess.run([str(fresh_pan / "pan"), "bench", "runtime", "--quick"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": ""})
    assert done.returncode == 2, done.stderr
    assert "pip install -e ./benchmarks" in done.stderr and "Traceback" not in done.stderr


def test_pan_split_without_spark_names_the_extra(fresh_pan: Path, tmp_path: Path) -> None:
    (tmp_path / "game.csv").write_text("4,10753295594424116,0,0,0,0,0,0,0,0,0,0,0\n")
    done = subprocess.run([str(fresh_pan / "pan"), "split", "game.csv", "--out", "split"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "pan[spark]" in done.stdout + done.stderr and "Traceback" not in done.stderr


def test_pan_run_works_from_any_directory(fresh_pan: Path, tmp_path: Path) -> None:
    data = on_free_ports(json.loads((ROOT / "workflows" / "demo_forwarding.json").read_text()))
    (tmp_path / "wf.json").write_text(json.dumps(data))
    peers = {w.get("peer", w["name"]) for w in data["workers"]}
    log = tmp_path / "run.log"
    with log.open("w") as out:
        proc = subprocess.Popen([str(fresh_pan / "pan"), "run", "wf.json"], cwd=tmp_path, stdout=out,
                                stderr=subprocess.STDOUT,
                                **shared_lifeline().spawn_options({**os.environ, "PYTHONPATH": ""}))
    try:
        deadline = time.monotonic() + 300
        while log.read_text().count("worker(s) running") < len(peers):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    # Not checked here: on Ctrl-C aiohttp 3.14 sometimes logs an InvalidStateError traceback for a long poll
    # cut by the shutdown (seen in CI, 2026-11-24); that is a shutdown defect of its own, not the install's.
    assert proc.returncode == 0, log.read_text()[-3000:]
