"""Measurements of `pan bench fullgame`: one phase as a child process with the peak RSS of its process tree,
the bytes of a (compressed) recording by stream family, and the disk space a run needs.

Every process of a phase's tree (the child and all its descendants) is sampled with psutil every ``SAMPLE_S``;
each keeps its peak RSS and is named from its command line (``process_name``). A forked child (a generator's
pool worker, a pyspark daemon's worker) shows its parent's command line and is named after it as a
"(forked worker)". RSS counts pages shared with a parent in both, so the sum of a tree's RSS overstates its memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import common

if TYPE_CHECKING:
    import psutil

SAMPLE_S = 0.5
MB = 2**20
#: Processes of a phase whose peak RSS stays below this many MB are short helpers, not the pipeline's.
MIN_RSS_MB = 4.0
#: What each `pan COMMAND` of the pipeline is, in the tables.
ROLES = {"generate": "match generator", "split": "Spark driver", "replay": "simulator and recorder",
         "run": "launcher", "repository": "repository"}
#: Stream families whose prefix says little: the player averages are A1..A8 and B1..B8.
FAMILY_NAMES = {"A": "player averages", "B": "player averages"}

# --- disk space -------------------------------------------------------------------------

#: Bytes the replay of full_game_3_peers.json writes per second of rows (play and leads), zstd-compressed
#: (`pan replay --compress`): 1 min of play (80 s of rows with the leads) recorded 68 MB (360 MB of JSON), 1.5 min
#: (110 s) 95 MB (503 MB), i.e. 0.85 MB per second of rows (a whole match: about 3 GB).
RECORD_BYTES_PER_S = 0.9e6
#: Headroom over the recording's estimate (Spark's staging folder, logs, the estimate's own error); the CSV's
#: estimate (`simulator.disk_space.generated_bytes`) is already an upper bound.
DISK_MARGIN = 1.15


def needed_bytes(data_s: float) -> int:
    """Disk space one repetition takes at its largest, for ``data_s`` seconds of rows (play and the leads before
    and after each half): the generated CSV, its split (`SPLIT_FACTOR` times the CSV) and the compressed
    recording."""
    from simulator.disk_space import SPLIT_FACTOR, generated_bytes

    return int(generated_bytes(data_s) * (1 + SPLIT_FACTOR) + RECORD_BYTES_PER_S * data_s * DISK_MARGIN)


# --- processes --------------------------------------------------------------------------


def process_name(cmdline: Sequence[str]) -> str:
    """A process of the pipeline by its command line: ``pan peer peer1``, ``pan split (Spark driver)``,
    ``Spark JVM (java)``, ``Spark python worker``, else the program's name."""
    if not cmdline:
        return "?"
    at = next((i for i, arg in enumerate(cmdline[:3]) if Path(arg).name == "pan"), None)
    if at is not None:
        args = list(cmdline[at + 1 :])
        command = args[0] if args else ""
        if command == "peer" and "--name" in args[:-1]:
            return f"pan peer {args[args.index('--name') + 1]}"
        return f"pan {command} ({ROLES[command]})" if command in ROLES else f"pan {command}".rstrip()
    program = Path(cmdline[0]).name
    if program.startswith("java"):
        return "Spark JVM (java)"
    if any(arg.startswith(("pyspark.daemon", "pyspark.worker")) for arg in cmdline):
        return "Spark python worker"
    return program


@dataclass
class Tree:
    """Peak RSS per process of one phase's tree, and of the whole tree at one sample."""

    names: dict[int, str] = field(default_factory=dict)
    peaks: dict[int, int] = field(default_factory=dict)
    tree_peak: int = 0
    samples: int = 0

    def sample(self, root: psutil.Process) -> None:
        import psutil

        try:
            processes = [root, *root.children(recursive=True)]
        except psutil.Error:  # the phase's process has just ended
            return
        seen: dict[int, tuple[str, int, int]] = {}  # pid -> (name from its command line, parent pid, rss)
        for process in processes:
            with contextlib.suppress(psutil.Error):
                rss = process.memory_info().rss
                # read every time: right after fork a child still shows its parent's command line
                seen[process.pid] = (process_name(process.cmdline()), process.ppid(), rss)
        for pid, (name, ppid, rss) in seen.items():
            if ppid in seen and seen[ppid][0] == name:  # a pool's worker: its parent's command line
                name = name.split(" (", 1)[0] + " (forked worker)"
            self.names[pid] = name
            self.peaks[pid] = max(self.peaks.get(pid, 0), rss)
        self.tree_peak = max(self.tree_peak, sum(rss for _, _, rss in seen.values()))
        self.samples += 1

    def by_name(self) -> dict[str, dict[str, Any]]:
        """Per process name (in the order first seen): the largest peak RSS of its processes, MB, and how many.
        Helpers that never reach ``MIN_RSS_MB`` (a JVM's ``jspawnhelper``, a ``chmod`` of Spark's) are left out."""
        named: dict[str, dict[str, Any]] = {}
        for pid, name in self.names.items():
            entry = named.setdefault(name, {"peak_rss_mb": 0.0, "processes": 0})
            entry["peak_rss_mb"] = max(entry["peak_rss_mb"], round(self.peaks[pid] / MB, 1))
            entry["processes"] += 1
        return {name: entry for name, entry in named.items() if entry["peak_rss_mb"] >= MIN_RSS_MB}


class PhaseFailed(RuntimeError):
    """A phase's process exited with an error: its command and the end of its output."""


def run_phase(args: Sequence[str], log: Path, ok_codes: Sequence[int] = (0,)) -> dict[str, Any]:
    """Run ``args`` as a child (common.Child) to its end, sampling its tree: wall seconds, exit code, stdout,
    peak RSS per process and of the tree. Its stderr goes to ``log``. Raises PhaseFailed on another exit code."""
    from pan.util import eventloop

    tree = Tree()
    wall_s, code, out, err = eventloop.run(_sampled(args, tree))
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(err)
    if code not in ok_codes:
        tail = err[-1500:].decode(errors="replace").strip()
        raise PhaseFailed(f"`{' '.join(args[2:4])}` exited {code} (log {log}): {tail}")
    return {"wall_s": round(wall_s, 3), "exit_code": code, "stdout": out, "samples": tree.samples,
            "tree_peak_rss_mb": round(tree.tree_peak / MB, 1), "processes": tree.by_name()}


async def _sampled(args: Sequence[str], tree: Tree) -> tuple[float, int | None, bytes, bytes]:
    """Wall seconds, exit code, stdout and stderr of the child, its tree sampled into ``tree`` meanwhile."""
    import psutil

    child = common.Child(args, ready=False, grace_s=30)
    started = time.monotonic()
    await child.start()
    try:
        assert child.process is not None and child.process.stdout is not None
        stdout = asyncio.create_task(child.process.stdout.read())  # drained meanwhile: a summary can be long
        root = psutil.Process(child.pid)
        while child.process.returncode is None:
            tree.sample(root)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SAMPLE_S):
                    await child.process.wait()
        wall_s = time.monotonic() - started
        out, code = await stdout, child.process.returncode
        err = child.stderr_tail(chars=1 << 24).encode()
    finally:
        await child.stop()
    return wall_s, code, out, err


# --- the recording ----------------------------------------------------------------------


def stream_family(stream: str) -> str:
    """A stream's family: its name up to the first ``_`` or digit (HM, RUNAGG, RUN, BP, BALLHITS, SHOTS, SENSOR,
    ...); A1..A8 and B1..B8 are the player averages."""
    prefix = re.match(r"[^_0-9]*", stream).group()  # type: ignore[union-attr]  # always matches
    return FAMILY_NAMES.get(prefix, prefix or stream)


def recording_sizes(record: Path, json_bytes: dict[str, int], minutes: float) -> dict[str, Any]:
    """Per stream family (largest on disk first) and in all: the streams recorded, the bytes of their files on
    disk (zstd-compressed) and of their JSON lines before compression (``json_bytes``, per stream, from
    `pan replay --json`), each also per minute of play (``minutes`` of play in the match)."""
    from simulator.recording import recorded_files

    families: dict[str, dict[str, Any]] = {}
    files = recorded_files(record)
    for stream, path in files.items():
        entry = families.setdefault(stream_family(stream), {"streams": 0, "bytes": 0, "json_bytes": 0})
        entry["streams"] += 1
        entry["bytes"] += path.stat().st_size
        entry["json_bytes"] += json_bytes.get(stream, 0)
    for entry in families.values():
        per_minute(entry, minutes)
    ordered = dict(sorted(families.items(), key=lambda item: -item[1]["bytes"]))
    total = per_minute({"streams": len(files), "bytes": sum(f["bytes"] for f in families.values()),
                        "json_bytes": sum(f["json_bytes"] for f in families.values())}, minutes)
    return {**total, "families": ordered}


def per_minute(entry: dict[str, Any], minutes: float) -> dict[str, Any]:
    """``entry`` with its bytes and JSON bytes also per minute of play: what compares runs of different lengths."""
    entry["bytes_per_min"] = round(entry["bytes"] / minutes, 1)
    entry["json_bytes_per_min"] = round(entry["json_bytes"] / minutes, 1)
    return entry
