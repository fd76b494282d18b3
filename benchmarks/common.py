"""Shared helpers of the `pan bench` benchmarks.

Every benchmark reports the same way (machine, date, exact command, medians
and percentiles, a Markdown section between its own markers in
docs/benchmarks.md, PNG plots in docs/img/), so those pieces live here once.
Imports stay light: `pan` imports the bench CLI on every start.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from pan.lifeline import shared_lifeline

REPO_ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"

# --- numbers ----------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..1); NaN for no values."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def median(values: Iterable[float]) -> float:
    data = list(values)
    return statistics.median(data) if data else float("nan")


def summarize_ms(values_ms: Sequence[float]) -> dict[str, Any]:
    """count, p50/p90/p99/max in ms: the shape every delay table uses."""
    if not values_ms:
        return {"count": 0, "p50_ms": None, "p90_ms": None, "p99_ms": None, "max_ms": None}
    import numpy as np

    arr = np.asarray(values_ms, dtype=float)
    p50, p90, p99 = np.percentile(arr, [50, 90, 99])
    return {
        "count": len(values_ms),
        "p50_ms": round(float(p50), 3),
        "p90_ms": round(float(p90), 3),
        "p99_ms": round(float(p99), 3),
        "max_ms": round(float(arr.max()), 3),
    }


def fmt(value: float | None, digits: int = 1) -> str:
    """A table cell: numbers with thousands separators, '-' for missing."""
    if value is None or value != value:  # None or NaN
        return "-"
    if isinstance(value, int) or abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


# --- where and how it ran ---------------------------------------------------------------


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def run_header(benchmark: str) -> dict[str, Any]:
    """What every results file starts with: which benchmark, when, how to rerun it, on what."""
    return {"benchmark": benchmark, "date": utc_now(), "command": command_line(), "machine": machine()}


def machine() -> dict[str, Any]:
    """CPU, cores, RAM, Python and load: the facts a reader needs to weigh the numbers."""
    import psutil

    model = platform.processor() or "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "ram_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }


def machine_line(m: dict[str, Any], load_at_end: Sequence[float] | None = None) -> str:
    line = (
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['ram_gb']} GB RAM, Python {m['python']}, {m['platform']}. "
        f"Load average at start: {', '.join(map(str, m['load_avg']))}"
    )
    if load_at_end is not None:
        line += f", at the end: {', '.join(f'{x:.2f}' for x in load_at_end)}"
    return line + "."


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command as typed, with repo-relative paths, so anyone can rerun it."""
    args = list(sys.argv if argv is None else argv)
    if args:
        exe = Path(args[0])
        with contextlib.suppress(ValueError):
            exe = exe.resolve().relative_to(REPO_ROOT)
        args[0] = "pan" if exe.name == "__main__.py" else str(exe)  # `python -m pan` is the `pan` command
    return shlex.join(args)


# --- report files -----------------------------------------------------------------------


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def write_section(path: Path, name: str, body: str) -> None:
    """Replace (or append) the section between ``name``'s markers; other sections are kept."""
    start_mark, end_mark = markers(name)
    section = f"{start_mark}\n{body.rstrip()}\n{end_mark}\n"
    if path.exists():
        text = path.read_text()
        start, end = text.find(start_mark), text.find(end_mark)
        if start >= 0 and end > start:
            text = text[:start] + section + text[end + len(end_mark) :].lstrip("\n")
        else:
            text = text.rstrip("\n") + "\n\n" + section
    else:
        text = "# Benchmarks\n\n" + section
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def image_dir(report: Path) -> Path:
    """docs/img beside docs/benchmarks.md."""
    return report.parent / "img"


def plot_path(report: Path, section: str) -> Path:
    """A section's plot: ``<report dir>/img/<section>.png``, linked from the section as ``img/<section>.png``."""
    return image_dir(report) / f"{section}.png"


def image_link(section: str, alt: str) -> str:
    """The Markdown link, relative to the report, to the section's plot."""
    return f"![{alt}](img/{section}.png)"


def write_report(report: str | Path, section: str, body: str, plot: Callable[[Path], Any]) -> None:
    """``--write REPORT``: draw the section's plot (``plot(png_path)``), then replace its Markdown section."""
    path = Path(report).resolve()
    png = plot_path(path, section)
    plot(png)
    write_section(path, section, body)
    print(f"wrote {path} and {png}", file=sys.stderr)


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None) -> str:
    """``align``: one char per column, 'l' or 'r' (default: first left, rest right)."""
    align = align or "l" + "r" * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


# --- system tools -----------------------------------------------------------------------


def ensure_tool(binary: str, apt_package: str) -> str | None:
    """Make ``binary`` available; None when it is, else why not (and how to get it).

    Installs the Debian package when running as root, as the Makefile does;
    never anything else.
    """
    if shutil.which(binary):
        return None
    if os.geteuid() != 0:
        return f"`{binary}` not found; install it with `sudo apt-get install -y {apt_package}`"
    if not shutil.which("apt-get"):
        return f"`{binary}` not found and no apt-get to install package {apt_package}"
    print(f"installing {apt_package} with apt-get ...", file=sys.stderr, flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", apt_package]):
        result = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            return f"`{' '.join(cmd)}` failed: {result.stderr.strip()[-300:]}"
    return None if shutil.which(binary) else f"package {apt_package} installed but `{binary}` is still missing"


# --- child processes --------------------------------------------------------------------

LIVE_CHILDREN: set[int] = set()  # pids; kill_leftovers() ends them if a normal stop was skipped


def kill_leftovers() -> None:
    for pid in list(LIVE_CHILDREN):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        LIVE_CHILDREN.discard(pid)


class Child:
    """A child process (own process group) that may print one ready line on stdout.

    Stopped with SIGTERM to its group, then SIGKILL after ``grace_s``; its
    stderr goes to a temporary file whose tail is shown when it fails.
    """

    def __init__(
        self,
        args: Sequence[str],
        *,
        ready: bool = True,
        startup_s: float = 30.0,
        grace_s: float = 8.0,
        stdin: bool = False,
        env: dict[str, str] | None = None,
    ) -> None:
        self.args = list(args)
        self.ready = ready
        self.startup_s = startup_s
        self.grace_s = grace_s
        self.want_stdin = stdin
        self.env = env
        self.process: asyncio.subprocess.Process | None = None
        self.ready_line = b""
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    async def start(self) -> Child:
        self.process = await asyncio.create_subprocess_exec(
            *self.args,
            stdin=asyncio.subprocess.PIPE if self.want_stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=self._stderr,
            cwd=REPO_ROOT,
            start_new_session=True,
            limit=2**24,
            **shared_lifeline().spawn_options(self.env),  # dies with the benchmark, even on SIGKILL
        )
        LIVE_CHILDREN.add(self.process.pid)
        if self.ready:
            try:
                self.ready_line = await self.readline(self.startup_s)
                if not self.ready_line:
                    raise RuntimeError(f"{shlex.join(self.args[:6])} did not start: {self.stderr_tail()}")
            except BaseException:
                await self.stop()
                raise
        return self

    async def readline(self, timeout_s: float) -> bytes:
        assert self.process is not None and self.process.stdout is not None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                return await self.process.stdout.readline()
        return b""

    async def send(self, line: bytes) -> None:
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(line if line.endswith(b"\n") else line + b"\n")
        await self.process.stdin.drain()

    def stderr_tail(self, chars: int = 2000) -> str:
        with contextlib.suppress(ValueError):
            self._stderr.seek(0)
            return self._stderr.read()[-chars:].decode(errors="replace")
        return ""

    async def __aenter__(self) -> Child:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        try:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGTERM)
                try:
                    async with asyncio.timeout(self.grace_s):
                        await process.wait()
                except TimeoutError:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(process.pid, signal.SIGKILL)
                    await process.wait()
        finally:
            LIVE_CHILDREN.discard(process.pid)
            self._stderr.close()
