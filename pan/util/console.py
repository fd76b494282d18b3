"""What a person at a terminal sees of a long command: a progress bar with ETA, and a summary table at the end.

Both come from ``rich`` (the ``progress`` extra). A bar is drawn only when stderr is a terminal and rich is
installed, so logs, pipes and tests stay as they were; a table falls back to aligned plain text.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TextIO

try:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeRemainingColumn
    from rich.table import Table
except ImportError:  # pragma: no cover - the core install without the extra
    Console = None  # type: ignore[assignment,misc]


def available() -> bool:
    return Console is not None


def interactive(stream: TextIO | None = None) -> bool:
    """True if bars make sense: rich is installed and ``stream`` (stderr) is a terminal."""
    stream = sys.stderr if stream is None else stream
    return available() and hasattr(stream, "isatty") and stream.isatty()


class Bar:
    """One task's bar; every method is a no-op when nothing is drawn (not a terminal)."""

    def __init__(self, progress: Any | None, task: Any | None) -> None:
        self._progress, self._task = progress, task

    @property
    def shown(self) -> bool:
        return self._progress is not None

    def update(self, completed: float, total: float | None = None, description: str | None = None) -> None:
        if self._progress is None:
            return
        fields: dict[str, Any] = {"completed": completed}
        if total is not None:
            fields["total"] = total
        if description is not None:
            fields["description"] = description
        self._progress.update(self._task, **fields)


@contextmanager
def progress_bar(description: str, total: float | None, *, unit: str = "", force: bool = False) -> Iterator[Bar]:
    """A bar on stderr with percentage and ETA while the block runs (``force``: even off a terminal, for tests).

    ``unit`` names what is counted (shown as ``done/total unit``).
    """
    if not (force or interactive()):
        yield Bar(None, None)
        return
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
               MofNCompleteColumn(), TextColumn(unit), TextColumn("ETA"), TimeRemainingColumn()]
    console = Console(stderr=True, force_terminal=force or None)
    with Progress(*columns, console=console, transient=False) as progress:
        task: TaskID = progress.add_task(description, total=total)
        yield Bar(progress, task)


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]], out: TextIO | None = None) -> None:
    """A short table on ``out`` (stdout): rich's on a terminal, aligned columns otherwise."""
    out = sys.stdout if out is None else out
    key_value = not any(headers)  # a list of named values: no header row, values read left to right
    if interactive(out):
        rich_table = Table(title=title, show_header=not key_value)
        for index, header in enumerate(headers):
            rich_table.add_column(header, justify="left" if index == 0 or key_value else "right")
        for row in rows:
            rich_table.add_row(*(str(cell) for cell in row))
        Console(file=out).print(rich_table)
        return
    cells = [*([] if key_value else [[str(h) for h in headers]]), *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    print(title, file=out)
    for row in cells:
        line = "  ".join(c.ljust(w) if i == 0 or key_value else c.rjust(w)
                         for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        print(line.rstrip(), file=out)
