"""`pan COMMAND` loads only the command module named after COMMAND (pan/cli.py), and every command still works."""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from pan.cli import ENTRY_POINT_GROUP, build_parser, command_entries

ROOT = Path(__file__).resolve().parents[3]


def commands(parser: argparse.ArgumentParser) -> set[str]:
    return {name for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name in action.choices}


ENTRIES = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
def test_each_entry_is_named_after_a_command_of_its_module(entry: object) -> None:
    name = entry.name  # type: ignore[attr-defined]
    assert [e.value for e in command_entries(name)] == [entry.value]  # type: ignore[attr-defined]
    assert name in commands(build_parser(name))


def test_every_command_a_module_registers_has_its_entry() -> None:
    """A command without an entry of its own would load every module, as if it were a typo."""
    named = {entry.name for entry in ENTRIES}
    assert commands(build_parser()) <= named


def test_no_command_or_an_unknown_one_loads_every_module_once() -> None:
    modules = sorted({entry.value for entry in ENTRIES})
    for command in (None, "nosuch", "--help"):
        loaded = [entry.value for entry in command_entries(command)]
        assert sorted(loaded) == modules and len(loaded) == len(set(loaded))
    own = [value.startswith("pan.") for value in (entry.value for entry in command_entries())]
    assert own == sorted(own, reverse=True)  # PAN's own commands first in `pan --help`


@pytest.mark.process
def test_a_peer_process_does_not_import_the_other_commands() -> None:
    probe = ("import sys; from pan.cli import main\n"
             "try:\n    main(['peer', '--help'])\nexcept SystemExit:\n    pass\n"
             "print('loaded:', *(m for m in ('workers.dashboard.app', 'simulator.simulate', "
             "'pan.commands.deploy', 'simulator.replay_cli') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=180,
                          check=True)
    assert done.stdout.strip().splitlines()[-1] == "loaded:", done.stdout
    typo = subprocess.run([sys.executable, "-m", "pan", "peeer"], capture_output=True, text=True, cwd=ROOT,
                          timeout=180, check=False)
    assert typo.returncode == 2 and "invalid choice" in typo.stderr and "replay" in typo.stderr


def test_pan_subscribe_cuts_its_count_at_a_tuple_never_at_a_marker() -> None:
    from pan.commands.runtime import up_to_tuples

    tuples = [b'{"i":5}', b'{"i":9}', b'{"gap":1,"i":10}']  # encoded: markers and tuples are all bytes
    gap, reset = b'{"gap":{"from":6,"to":8}}', b'{"reset":{}}'
    items = [reset, tuples[0], gap, tuples[1], tuples[2]]
    assert up_to_tuples(items, tuples, None) == (items, 3)
    assert up_to_tuples(items, tuples, 5) == (items, 3)
    assert up_to_tuples(items, tuples, 1) == (items[:2], 1)
    assert up_to_tuples(items, tuples, 2) == (items[:4], 2)  # the gap before the second tuple comes with it
    assert up_to_tuples(items, tuples, 0) == ([], 0)
    decoded = [{"i": 1}, {"i": 2}]
    assert up_to_tuples([{"gap": {}}, *decoded], decoded, 1) == ([{"gap": {}}, decoded[0]], 1)
