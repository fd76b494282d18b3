"""The wheel, installed (not editable) into a fresh venv, runs the demos from any directory (issue 15, item 1).

Offline: the requirements come from the wheelhouse `pan deploy install` builds from this venv's versions
(`pan/deploy/install.py`), plus the Spark extra's wheels built the same way. The demos run on free-port copies
of the shipped workflows (other tests may hold the shipped ports), read from the installed package.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from pan.workflow.parser import on_free_ports
from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]
SPARK = ("pyspark", "py4j", "psutil")


def _pip(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    install = pytest.importorskip("pan.deploy.install")
    house = install.wheelhouse()  # the core's requirements, cached across runs
    extras = install.CACHE / f"extras-py{sys.version_info.major}{sys.version_info.minor}"
    _pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(extras), *(f"{d}=={version(d)}" for d in SPARK))
    ours = tmp_path_factory.mktemp("wheel")
    _pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(ours), str(ROOT))
    wheel = next(ours.glob("pan-*.whl"))
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-index",
                           "--find-links", str(house[0].parent), "--find-links", str(extras), f"{wheel}[spark]"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return venv / "bin"


def _run(bin_dir: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": "", "COLUMNS": "1000"}  # help text on one line
    return subprocess.run([str(bin_dir / "pan"), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=1500)  # a loaded 2-core machine took 6 min for the short demo (load 15)


def _shipped_default(bin_dir: Path, cwd: Path, command: str, name: str) -> Path:
    """The default file ``name`` that ``pan COMMAND --help`` shows: a file of the installed package."""
    text = " ".join(_run(bin_dir, cwd, command, "--help").stdout.split())
    match = re.search(rf"\(default: (\S+/{re.escape(name)})\)", text)
    assert match is not None, text
    path = Path(match.group(1))
    assert path.is_file() and "site-packages" in path.parts and not path.is_relative_to(ROOT), path
    return path


def _free_copy(shipped: Path, folder: Path) -> Path:
    target = folder / f"free_{shipped.name}"
    target.write_text(json.dumps(on_free_ports(json.loads(shipped.read_text()))))
    return target


def test_only_pan_and_its_scenario_are_installed(installed: Path, tmp_path: Path) -> None:
    """The wheel adds ``pan`` and the scenario's ``simulator`` and ``workers`` to an environment, and nothing else."""
    env = {**os.environ, "PYTHONPATH": ""}
    found = subprocess.run([str(installed / "python"), "-c", "import benchmarks"], cwd=tmp_path, capture_output=True,
                           env=env)
    assert found.returncode != 0
    listed = subprocess.run([str(installed / "python"), "-c", "from importlib.metadata import files; "
                             "print(*sorted({f.parts[0] for f in files('pan') if f.suffix == '.py'}))"],
                            cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["pan", "simulator", "workers"]


def test_demo_forwarding_runs_from_any_directory(installed: Path, tmp_path: Path) -> None:
    workflow = _free_copy(_shipped_default(installed, tmp_path, "demo-forwarding", "demo_forwarding.json"), tmp_path)
    _shipped_default(installed, tmp_path, "demo-forwarding", "demo_rows.csv")
    done = _run(installed, tmp_path, "demo-forwarding", "--workflow", str(workflow), "--speedup", "20")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "all rows received" in done.stdout


@pytest.mark.heavy  # the generated match's half-time break gives 1.1M heat-map tuples to record: 2-8 min
def test_demo_writes_its_outputs_in_the_current_directory(installed: Path, tmp_path: Path) -> None:
    workflow = _free_copy(_shipped_default(installed, tmp_path, "demo", "full_game_3_peers.json"), tmp_path)
    done = _run(installed, tmp_path, "demo", "--minutes", "0.2", "--workflow", str(workflow))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    recorded = list((tmp_path / "demo-out" / "streams").glob("*.jsonl"))
    assert recorded and any(path.stat().st_size for path in recorded)
    assert (tmp_path / "demo-out" / "game" / "full-game").is_file()
