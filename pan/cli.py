"""The `pan` command.

Each subcommand lives in its own module that exposes ``register(subparsers)``.
The modules come from the ``pan.commands`` entry-point group (``pyproject.toml``),
so this file names none of them: a scenario package adds its commands the
way it adds its component types.
"""

from __future__ import annotations

import argparse
import logging
import sys
from importlib.metadata import EntryPoint, entry_points

ENTRY_POINT_GROUP = "pan.commands"


def command_entries() -> list[EntryPoint]:
    """PAN's own command modules first, then the others, each group by name (the order of ``pan --help``)."""
    return sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (not e.value.startswith("pan."), e.name))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pan", description="PAN: pull-based peer-to-peer analysis network")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for entry in command_entries():
        try:
            module = entry.load()
        except ModuleNotFoundError as exc:
            if exc.name is None or not entry.value.startswith(exc.name):
                raise
            logging.getLogger(__name__).warning("command module %s is missing; its commands are off", entry.value)
            continue
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    if not command_entries():
        print(f"pan: no {ENTRY_POINT_GROUP} entry points: PAN is not installed (pip install -e .)", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
