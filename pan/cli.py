"""The `pan` command.

Each subcommand lives in its own module that exposes ``register(subparsers)``;
the module list below is the only place that knows them all.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

COMMAND_MODULES: list[str] = [
    "pan.commands.runtime",  # repository, run, peer, subscribe, validate
    "pan.commands.demo_forwarding",  # demo-forwarding
    "workers.demo_cli",  # demo
    "simulator.cli",  # generate
    "pan.commands.offline",  # split
    "simulator.simulate_cli",  # simulate
    "pan.commands.stats",  # stats delays
    "simulator.receiver_cli",  # receive
    "simulator.replay_cli",  # replay
    "benchmarks.cli",  # bench fanout, redis, network
    "workers.reference_cli",  # reference (Spark batch Q1 to Q4)
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pan", description="PAN: pull-based peer-to-peer analysis network")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not module_name.startswith(exc.name):
                raise
            logging.getLogger(__name__).warning("command module %s is missing; its commands are off", module_name)
            continue
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
