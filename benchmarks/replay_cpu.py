"""One `pan replay` run of `pan bench replay` with the CPU of its process tree (and a py-spy profile of its peers).

Every process is named from its command line (``classify``) and sampled with psutil every ``SAMPLE_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import common, pyspy, wires

if TYPE_CHECKING:
    import psutil

SAMPLE_S = 0.5
KINDS = {"replay": ("driver", "replay driver"), "run": ("launcher", "launcher (pan run)"),
         "repository": ("repository", "repository")}  # `pan COMMAND` -> (kind, name)
#: py-spy attaches this long after every producer of the workflow has registered: the driver feeds from then
#: on (a fixed time from the start profiled the imports of a slow start instead, at load 10 and more).
PROFILE_AFTER_S = 2.0


def classify(cmdline: list[str]) -> tuple[str, str]:
    """(kind, name) of a process of the replay, from its command line (`python -m pan COMMAND ...`).

    Kinds: driver, launcher, repository, peer (named after the peer) and other.
    """
    if "pan" not in cmdline:
        return "other", Path(cmdline[0]).name if cmdline else "?"
    args = cmdline[cmdline.index("pan") + 1 :]
    command = args[0] if args else ""
    if command == "peer" and "--name" in args[:-1]:
        return "peer", args[args.index("--name") + 1]
    return KINDS.get(command, ("other", f"pan {command}"))


def sample(root: psutil.Process, seen: dict[int, tuple[tuple[str, str], float]],
           wire_of: dict[int, str | None] | None = None) -> None:
    """Record ((kind, name), CPU seconds so far) of ``root`` and every descendant; a process's last sample wins.

    ``wire_of`` gets each process's ``PAN_WIRE`` (read once per process), to check a run used one format.
    """
    import psutil

    from pan.wire.arrow_pages import WIRE_ENV

    with contextlib.suppress(psutil.Error):
        tree = [root, *root.children(recursive=True)]
        for process in tree:
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                # read every time: right after fork a child still shows its parent's command line,
                # and an exited (zombie) one shows none
                cmdline = process.cmdline()
                key = classify(cmdline) if cmdline else seen.get(process.pid, (("other", "?"), 0.0))[0]
                seen[process.pid] = (key, times.user + times.system)
                if wire_of is not None and process.pid not in wire_of and cmdline:
                    wire_of[process.pid] = process.environ().get(WIRE_ENV)


async def start_profiles(
    seen: dict[int, tuple[tuple[str, str], float]], work: Path, seconds: float
) -> list[pyspy.Recording]:
    """One py-spy recorder per peer process seen so far."""
    binary = pyspy.py_spy()
    if binary is None:
        print("py-spy not found (dev extra): no profile", file=sys.stderr)
        return []
    recordings = [pyspy.Recording(name, pid, work / f"profile-{name}.txt")
                  for pid, ((kind, name), _) in seen.items() if kind == "peer"]
    for recording in recordings:
        await recording.start(binary, seconds)
    return recordings


async def producers_registered(workflow_path: Path) -> float:
    """Wait until every producer of the workflow has registered (the replay feeds from then on); monotonic time."""
    from pan.workflow.parser import load_workflow
    from simulator.replay import output_streams, wait_for_producers

    workflow = load_workflow(workflow_path)
    await wait_for_producers(workflow, output_streams(workflow))
    return time.monotonic()


async def replay_with_cpu(
    workflow: Path, data: Path, work: Path, wire: str, profile_s: float = 0.0, decode: bool = False,
    to_ts: int | None = None,
) -> tuple[dict[str, Any], dict[tuple[str, str], float], float, pyspy.Profile | None]:
    """Run `pan replay` on ``data`` with ``PAN_WIRE=wire``: its JSON summary, CPU seconds per (kind, name) of
    process, wall seconds, and with ``profile_s`` a py-spy profile of the peers. ``decode``: the recorder
    decodes every tuple (``--record-decoded``); ``to_ts``: only the rows up to that ts are fed (``--to``).

    Raises if a process of the run had another ``PAN_WIRE`` (the format would be mixed)."""
    import psutil

    child = common.Child([sys.executable, "-m", "pan", "replay", "--json", str(workflow), "--data", str(data),
                          "--record", str(work / "record"), *(["--record-decoded"] if decode else []),
                          *([] if to_ts is None else ["--to", str(to_ts)])],
                         ready=False, grace_s=30, env=wires.env(wire))
    seen: dict[int, tuple[tuple[str, str], float]] = {}
    wire_of: dict[int, str | None] = {}
    recordings: list[pyspy.Recording] | None = None if profile_s > 0 else []
    started = time.monotonic()
    await child.start()
    producers = asyncio.create_task(producers_registered(workflow)) if profile_s > 0 else None
    try:
        assert child.process is not None and child.process.stdout is not None
        stdout = asyncio.create_task(child.process.stdout.read())  # drained meanwhile: the summary is long
        root = psutil.Process(child.pid)
        while child.process.returncode is None:
            sample(root, seen, wire_of)
            if recordings is None and producers is not None and producers.done() and not producers.exception() \
                    and time.monotonic() - producers.result() >= PROFILE_AFTER_S:
                recordings = await start_profiles(seen, work, profile_s)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SAMPLE_S):
                    await child.process.wait()
        wall_s = time.monotonic() - started
        out, code = await stdout, child.process.returncode
        if code not in (0, 1) or not out.strip():  # 1 = some recorder missed tuples: still a measurement
            raise RuntimeError(f"pan replay exited {code}: {child.stderr_tail()}")
    finally:
        if producers is not None:
            producers.cancel()
            await asyncio.gather(producers, return_exceptions=True)
        await child.stop()
        for recording in recordings or []:
            await recording.wait(timeout_s=profile_s + 30)
    mixed = sorted({seen[pid][0][1] for pid, got in wire_of.items() if got != wire and seen[pid][0][0] != "other"})
    if mixed:
        raise RuntimeError(f"processes without PAN_WIRE={wire}: {', '.join(mixed)}")
    cpu: dict[tuple[str, str], float] = {}
    for key, seconds in seen.values():
        cpu[key] = cpu.get(key, 0.0) + seconds
    profile = None
    if recordings:
        profile = pyspy.Profile()
        for recording in recordings:
            profile.add_file(recording.out)
    return json.loads(out), cpu, wall_s, profile
