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
from importlib.metadata import EntryPoint, entry_points, version

from pan.util import eventloop
from pan.wire import arrow_pages

ENTRY_POINT_GROUP = "pan.commands"
#: Commands that come with a distribution of their own, and how to get one that is missing.
SEPARATE_COMMANDS = {
    "bench": "the benchmarks are a distribution of their own in PAN's repository: "
    "pip install -e ./benchmarks from a checkout (make bench installs it)",
}


def command_entries(command: str | None = None) -> list[EntryPoint]:
    """The command modules to load: for ``command``, only the ones whose entry is named after it; for no
    command, or one no entry is named after (a typo, or the entry names of an older install), all of them.

    Each entry is named after a command its module registers (a module with several commands has an entry
    per command), so ``pan peer`` imports only what ``peer`` needs. Importing every command module costs a
    second of CPU in each process, and `pan run` starts one per peer. The order is that of ``pan --help``:
    PAN's own modules first, then the others, each group by name, every module once.
    """
    found = entry_points(group=ENTRY_POINT_GROUP)
    named = [entry for entry in found if entry.name == command]
    modules: dict[str, EntryPoint] = {}
    for entry in sorted(named or found, key=lambda e: (not e.value.startswith("pan."), e.name)):
        modules.setdefault(entry.value, entry)
    return list(modules.values())


class VersionAction(argparse.Action):
    """``--version``: PAN's version and the event loop its processes run on (after an earlier ``--no-uvloop``)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and the event loop, then exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        if getattr(namespace, "no_uvloop", False):
            eventloop.turn_off_uvloop()
        parser.exit(message=f"pan {version('pan')} (event loop: {eventloop.loop_name()})\n")


LOGGING_OPTIONS = {("-v", "--verbose"): "debug logging", ("-q", "--quiet"): "warnings and errors only"}


def add_logging_options(parser: argparse.ArgumentParser, *, here: bool) -> None:
    """``-v``/``-q`` on ``pan`` itself and on every subcommand, so that they work before or after it (a
    subcommand that has an option of the same name keeps its own)."""
    default = False if here else argparse.SUPPRESS  # a subcommand must not reset what was given before it
    taken = {flag for action in parser._actions for flag in action.option_strings}
    for flags, help_text in LOGGING_OPTIONS.items():
        if not taken & set(flags):
            parser.add_argument(*flags, action="store_true", default=default, help=help_text)


def _finish_subcommands(parser: argparse.ArgumentParser) -> None:
    """Every (nested) subcommand shows its defaults in ``--help`` and takes ``-v``/``-q``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                sub.formatter_class = argparse.ArgumentDefaultsHelpFormatter
                add_logging_options(sub, here=False)
                _finish_subcommands(sub)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``pan``, with the commands of ``command_entries(command)``."""
    parser = argparse.ArgumentParser(prog="pan", description="PAN: pull-based peer-to-peer analysis network")
    add_logging_options(parser, here=True)
    parser.add_argument("--no-uvloop", action="store_true",
                        help=f"run on asyncio's default event loop, also in child processes ({eventloop.ENV_VAR}=0)")
    parser.add_argument("--version", action=VersionAction)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for entry in command_entries(command):
        try:
            module = entry.load()
        except ModuleNotFoundError as exc:
            if exc.name is None or not entry.value.startswith(exc.name):
                raise
            logging.getLogger(__name__).warning("command module %s is missing; its commands are off", entry.value)
            continue
        module.register(subparsers)
    _finish_subcommands(parser)
    return parser


def missing_command(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """How to get the command ``argv`` asks for when its distribution is not installed (None if it is)."""
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    if command not in SEPARATE_COMMANDS:
        return None
    installed = {name for action in parser._actions if isinstance(action, argparse._SubParsersAction)
                 for name in action.choices}
    return None if command in installed else f"pan {command} is not installed; {SEPARATE_COMMANDS[command]}"


def main(argv: list[str] | None = None) -> int:
    if not command_entries():
        print(f"pan: no {ENTRY_POINT_GROUP} entry points: PAN is not installed (pip install -e .)", file=sys.stderr)
        return 2
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(next((arg for arg in argv if not arg.startswith("-")), None))
    hint = missing_command(parser, argv)
    if hint is not None:
        print(f"pan: {hint}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    for problem in (arrow_pages.wire_env_problem(), eventloop.env_problem()):
        if problem is not None:
            print(f"pan: {problem}", file=sys.stderr)
            return 2
    if args.no_uvloop:
        eventloop.turn_off_uvloop()
    if args.verbose and args.quiet:
        print("pan: -v and -q cannot go together", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
