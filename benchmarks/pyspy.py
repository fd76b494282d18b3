"""Sampling profiles of running PAN processes with py-spy, summarised per function.

A benchmark that misses a target should say where the CPU goes.  py-spy
attaches to a running process from the outside (no code change, little
overhead with ``--nonblocking``) and writes every sampled stack as one
"collapsed" line (``frame;frame;... count``).  This module starts one
recorder per process and folds their files into two rankings: *self* time
(the innermost frame: where the interpreter actually was) and *inclusive*
time (any frame on the stack: what a call costs with everything below it).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import common

RATE_HZ = 100
#: ``function (path/to/file.py:123)`` in py-spy's collapsed output.
FRAME = re.compile(r"^(?P<function>.*) \((?P<path>.*?)(?::\d+)?\)$")
#: Path prefixes that say nothing to a reader: virtualenv, standard library, checkout.
NOISE = re.compile(r".*/(?:site-packages|python3\.\d+|lib)/")


def py_spy() -> str | None:
    """The py-spy binary next to this interpreter (dev extra), or on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


@dataclass
class Recording:
    """One py-spy recorder attached to one process."""

    label: str
    pid: int
    out: Path
    recorder: common.Child | None = None

    async def start(self, binary: str, seconds: float) -> None:
        self.recorder = common.Child(
            [binary, "record", "--pid", str(self.pid), "--duration", str(max(1, round(seconds))),
             "--rate", str(RATE_HZ), "--format", "raw", "--nonblocking", "--output", str(self.out)], ready=False)
        await self.recorder.start()

    async def wait(self, timeout_s: float) -> None:
        """Wait for py-spy to write its file; a recorder that hangs is killed (its samples are lost)."""
        if self.recorder is None:
            return
        with contextlib.suppress(TimeoutError):
            await self.recorder.output(timeout_s)
        await self.recorder.kill()  # reaps it; SIGKILL only if it is still running


def frame_name(frame: str) -> str:
    """``function (module/path.py)`` without line number and environment prefix."""
    match = FRAME.match(frame.strip())
    if match is None:
        return frame.strip()
    return f"{match['function']} ({NOISE.sub('', match['path'])})"


@dataclass
class Profile:
    """Sample counts folded by function."""

    samples: int = 0
    self_time: Counter[str] = field(default_factory=Counter)
    inclusive: Counter[str] = field(default_factory=Counter)

    def add_file(self, path: Path) -> None:
        if not path.exists():
            return
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            frames = [frame_name(f) for f in stack.split(";") if f]
            if not frames:
                continue
            n = int(count)
            self.samples += n
            self.self_time[frames[-1]] += n
            for name in set(frames):
                self.inclusive[name] += n

    def share(self, counter: Counter[str], top: int) -> list[tuple[str, float]]:
        """The ``top`` functions of ``counter`` with their share of all samples."""
        total = self.samples or 1
        return [(name, count / total) for name, count in counter.most_common(top)]

    def share_of(self, function: str) -> float:
        """Inclusive share of the frames whose name starts with ``function`` (e.g. ``InputChannel.pull``)."""
        total = self.samples or 1
        return max((c for name, c in self.inclusive.items() if name.startswith(function + " ")), default=0) / total
