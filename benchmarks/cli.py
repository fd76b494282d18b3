"""`pan bench ...`: one subcommand per benchmark module.

A benchmark module exposes ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int`` and keeps its top-level imports light (``pan`` imports
this module on every start).  Adding a benchmark = one line in ``BENCHMARKS``.
``pan bench compare`` is not a benchmark: it reads two results files (`benchmarks/results.py`).
It reports through ``benchmarks.common`` (``run_header``, ``publish``) and starts
its processes as ``common.Child``.  Helper processes of a benchmark run as
``python -m benchmarks.X`` (``*_parts``, ``runtime_worker``, ``observer``,
``delay_proxy``); no benchmark is a script of its own.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from benchmarks import results

BENCHMARKS: dict[str, str] = {
    "runtime": "benchmarks.runtime_bench",
    "memory": "benchmarks.memory_bench",
    "wire": "benchmarks.wire_bench",
    "security": "benchmarks.security_bench",
    "ordering": "benchmarks.ordering_bench",
    "ball": "benchmarks.ball_bench",
    "simulation": "benchmarks.simulation_bench",
    "simulate": "benchmarks.simulate_bench",
    "fanout": "benchmarks.fanout",
    "redis": "benchmarks.redis_bench",
    "network": "benchmarks.network",
    "cluster": "benchmarks.cluster_bench",
    "query-delay": "benchmarks.query_delay",
    "distribution": "benchmarks.distribution",
    "replay": "benchmarks.replay_bench",
    "floor": "benchmarks.floor_bench",
    "arrays": "benchmarks.arrays_bench",
    "chaos": "benchmarks.chaos",
    "ordering-modes": "benchmarks.ordering_modes",
    "speculation": "benchmarks.speculation",
    "policies": "benchmarks.policies",
    "ingest": "benchmarks.ingest_bench",
    "dashboard": "benchmarks.dashboard_bench",
    "fullgame": "benchmarks.fullgame_bench",
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = subparsers.add_parser("bench", help="run a benchmark and report (see docs/benchmarks.md)")
    benches = bench.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    for name, module_name in BENCHMARKS.items():
        module = importlib.import_module(module_name)
        p = benches.add_parser(name, help=module.HELP, description=(module.__doc__ or "").split("\n\n")[0])
        module.add_arguments(p)
        results.add_max_load_argument(p)
        p.set_defaults(handler=functools.partial(run_benchmark, module.run))
    results.add_compare_parser(benches)


def write_bytecode() -> None:
    """Byte code for PAN, the scenario and the benchmarks, as an installed package has it.

    Every process a benchmark starts imports them; with ``PYTHONDONTWRITEBYTECODE`` set (as on some machines)
    and no byte code on disk, each would compile the sources again, and its start-up would count as the
    workflow's work (0.1-0.3 s of CPU per process). Only files that changed are compiled; a package that cannot
    be written to is left as it is.
    """
    import compileall

    import pan
    import simulator
    import workers

    for package in (pan, simulator, workers, sys.modules[__package__ or "benchmarks"]):
        compileall.compile_dir(Path(package.__file__).parent, quiet=2)


def run_benchmark(run: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run one benchmark; started by a test or a script, it stops when that process is gone.

    SIGTERM and SIGHUP stop it as Ctrl-C does: the benchmark's ``finally`` blocks and context managers
    run, so its children are stopped and its temporary folders removed (Python's default for SIGTERM
    ends the process on the spot, and left both behind). A forked child of the benchmark (a pool's worker,
    which its pool ends with SIGTERM) still dies at once.
    """
    from pan.launch.lifeline import die_with_launcher
    from pan.launch.processes import kill_leftovers

    results.note_load_at_start()
    refusal = results.load_refusal(getattr(args, "write", None), args.max_load)
    if refusal:
        print(f"pan bench {args.benchmark}: {refusal}", file=sys.stderr)
        return 2
    die_with_launcher()
    write_bytecode()

    bench_pid = os.getpid()

    def interrupt(signum: int, _frame: object) -> None:
        if os.getpid() != bench_pid:  # a forked child (a multiprocessing pool's worker): die as by default
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return run(args)
    except KeyboardInterrupt as exc:
        print(f"pan bench {args.benchmark}: interrupted ({exc or 'SIGINT'}); its processes and files are gone",
              file=sys.stderr)
        return 130
    finally:
        kill_leftovers()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
