"""A progress bar for a Spark job run from this process: tasks done of the active stages, from Spark's status
tracker, polled from a thread while the job runs (`pan/util/console.py` draws it only on a terminal)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pan.util import console

POLL_S = 0.5


def _stage_counts() -> tuple[str, int, int] | None:
    """(description, tasks done, tasks) of the active stages, or None before Spark has a context."""
    from pyspark import SparkContext  # only when a job runs: the spark extra may be missing

    context = SparkContext._active_spark_context
    if context is None:
        return None
    tracker = context.statusTracker()
    done = total = 0
    names = []
    for stage_id in tracker.getActiveStageIds():
        info = tracker.getStageInfo(stage_id)
        if info is not None:
            done, total = done + info.numCompletedTasks, total + info.numTasks
            names.append(f"stage {stage_id}")
    return (", ".join(names) or "starting Spark"), done, total


@contextmanager
def spark_stages(label: str) -> Iterator[None]:
    """While the block runs a Spark job, show its active stages' task progress with ETA."""
    if not console.interactive():
        yield
        return
    stop = threading.Event()
    with console.progress_bar(label, None, unit="tasks") as bar:
        def poll() -> None:
            while not stop.wait(POLL_S):
                try:
                    counts = _stage_counts()
                except Exception:  # the bar must never break the job
                    continue
                if counts is not None:
                    name, done, total = counts
                    bar.update(done, total=total or None, description=f"{label}: {name}")

        thread = threading.Thread(target=poll, name="spark progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=5)
