"""Common mistakes with `pan` get one line on stderr and a non-zero exit, never a traceback (issue 15, item 2)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import HOST

pytestmark = pytest.mark.process
ROOT = Path(__file__).resolve().parents[3]


def pan(*args: str) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "pan", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=180, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stderr.strip()


def test_an_unknown_peer_is_named_with_the_ones_there_are() -> None:
    code, err = pan("peer", "workflows/demo_forwarding.json", "--name", "nope")
    assert code == 2 and err.count("\n") == 0 and "'nope'" in err and "peer1" in err


def test_a_repository_port_in_use_is_one_line() -> None:
    with socket.socket() as held:
        held.bind((HOST, 0))
        held.listen()
        port = held.getsockname()[1]
        code, err = pan("repository", "--host", HOST, "--port", str(port))
    assert code == 1 and err.count("\n") == 0 and f"cannot listen on {HOST}:{port}" in err


def test_verbosity_goes_before_or_after_the_subcommand_and_help_shows_defaults() -> None:
    workflow = "workflows/demo_forwarding.json"
    for args in (["-v", "validate", workflow], ["validate", "-v", workflow], ["validate", workflow, "-q"]):
        assert pan(*args)[0] == 0, args
    code, err = pan("validate", "-v", "-q", workflow)
    assert code == 2 and "-v and -q" in err
    done = subprocess.run([sys.executable, "-m", "pan", "streams", "--help"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, check=True)
    assert "table (default: False)" in " ".join(done.stdout.split()) and "--quiet" in done.stdout


@pytest.mark.parametrize(("args", "names"), [(["--workflow", "missing.json"], "missing.json"),
                                             (["--rows", "nowhere.csv"], "nowhere.csv")])
def test_demo_forwarding_with_a_missing_file_is_one_line(args: list[str], names: str) -> None:
    code, err = pan("demo-forwarding", *args)
    assert code == 2 and err.count("\n") == 0 and names in err
