"""The event loop PAN's processes run on (pan/util/eventloop.py): uvloop unless turned off or missing."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pan.util import eventloop
from tests.support.demo_run import run_demo_until_every_peer_runs

try:
    import uvloop  # noqa: F401

    HAVE_UVLOOP = True
except ImportError:
    HAVE_UVLOOP = False


async def loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


@pytest.mark.parametrize("value", ["0", "false", "OFF", " no "])
def test_the_env_var_turns_uvloop_off(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(eventloop.ENV_VAR, value)
    assert eventloop.loop_factory() is None
    assert eventloop.loop_name() == "asyncio"
    assert eventloop.run(loop_module()).startswith("asyncio")


def test_without_uvloop_importable_the_default_loop_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(eventloop.ENV_VAR, raising=False)
    monkeypatch.setitem(sys.modules, "uvloop", None)  # any import of it now raises ImportError
    assert eventloop.loop_factory() is None
    assert eventloop.loop_name() == "asyncio"
    assert eventloop.run(loop_module()).startswith("asyncio")


@pytest.mark.skipif(not HAVE_UVLOOP, reason="uvloop not installed (the fast extra)")
@pytest.mark.parametrize("value", [None, "1", "yes"])
def test_uvloop_runs_when_installed_and_not_turned_off(monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    if value is None:
        monkeypatch.delenv(eventloop.ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(eventloop.ENV_VAR, value)
    assert eventloop.loop_name().startswith("uvloop ")
    assert eventloop.run(loop_module()).startswith("uvloop")


def test_run_returns_the_coroutines_result_and_raises_its_error() -> None:
    async def answer() -> int:
        return 42

    async def fail() -> None:
        raise KeyError("x")

    assert eventloop.run(answer()) == 42
    with pytest.raises(KeyError):
        eventloop.run(fail())


# --- real processes -----------------------------------------------------------------------------------


def run_workflow_and_read_loops(tmp_path: Path, flags: list[str], env: dict[str, str]) -> list[str]:
    """Start `pan [flags] run` on the forwarding demo workflow; the loop names its repository and peers log."""
    text, _ = run_demo_until_every_peer_runs([sys.executable, "-m", "pan", *flags], tmp_path, env)
    lines = text.splitlines()
    peer_loops = [line.rsplit(" running on ", 1)[1] for line in lines if "worker(s) running on " in line]
    repository = [line.rsplit("(", 1)[1].rstrip(")") for line in lines if "repository listening on" in line]
    assert len(peer_loops) == text.count("worker(s) running") >= 1 and len(repository) == 1, text
    return peer_loops + repository


@pytest.mark.process
@pytest.mark.timeout(600)
@pytest.mark.parametrize(("flags", "env_value", "expected"), [
    ([], None, "uvloop" if HAVE_UVLOOP else "asyncio"),
    (["--no-uvloop"], None, "asyncio"),
    ([], "0", "asyncio"),
])
def test_pan_run_and_its_children_use_the_chosen_loop(
    tmp_path: Path, flags: list[str], env_value: str | None, expected: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k != eventloop.ENV_VAR}
    if env_value is not None:
        env[eventloop.ENV_VAR] = env_value
    assert set(run_workflow_and_read_loops(tmp_path, flags, env)) == {expected}


@pytest.mark.process
@pytest.mark.parametrize(("flags", "env_value", "expected"), [
    ([], None, "uvloop" if HAVE_UVLOOP else "asyncio"),
    (["--no-uvloop"], None, "asyncio"),
    ([], "0", "asyncio"),
])
def test_pan_version_names_the_loop(flags: list[str], env_value: str | None, expected: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != eventloop.ENV_VAR}
    if env_value is not None:
        env[eventloop.ENV_VAR] = env_value
    done = subprocess.run([sys.executable, "-m", "pan", *flags, "--version"], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert f"(event loop: {expected}" in done.stdout + done.stderr


@pytest.mark.parametrize(("value", "understood"), [
    ("0", True), ("1", True), (" On ", True), ("", True), ("nah", False), ("2", False),
])
def test_a_mistyped_env_var_is_named_not_taken_for_the_default(
        monkeypatch: pytest.MonkeyPatch, value: str, understood: bool) -> None:
    monkeypatch.setenv(eventloop.ENV_VAR, value)
    problem = eventloop.env_problem()
    assert (problem is None) == understood
    if not understood:
        assert eventloop.ENV_VAR in problem and repr(value) in problem


@pytest.mark.process
@pytest.mark.parametrize(("name", "value"), [("PAN_UVLOOP", "nah"), ("PAN_WIRE", "arow")])
def test_pan_refuses_a_mistyped_setting_with_one_line(name: str, value: str) -> None:
    env = {**os.environ, name: value}
    done = subprocess.run([sys.executable, "-m", "pan", "subscribe", "SOME_STREAM", "--repository", "127.0.0.1:1"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"pan: {name}={value!r} is not one of"), done.stderr
    assert "Traceback" not in done.stderr
