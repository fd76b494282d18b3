"""The `process` marker: tests that start OS processes are marked, and the mark is checked.

The quick suite (`make test` without CI) leaves process and slow tests out so
it stays quick; CI runs them.  A quick test that starts a process (a
subprocess, a fork, the JVM of the shared Spark session) fails, so the quick suite
cannot silently grow slow again.  The check watches `subprocess.Popen` and
`os.fork` while each test is set up, runs and is torn down.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

MARK = "process"


class ProcessWatch:
    """Counts the processes started while the current test's phases run."""

    def __init__(self) -> None:
        self.item: pytest.Item | None = None
        self.started: list[str] = []

    def saw(self, what: str) -> None:
        if self.item is not None:
            self.started.append(what)

    def install(self) -> None:
        original_init = subprocess.Popen.__init__
        watch = self

        def watched_init(popen: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
            watch.saw(f"subprocess {str(args)[:80]}")
            original_init(popen, args, *rest, **kwargs)

        subprocess.Popen.__init__ = watched_init  # type: ignore[method-assign]
        os.register_at_fork(before=lambda: watch.saw("fork"))


WATCH = ProcessWatch()


def pytest_configure(config: pytest.Config) -> None:
    WATCH.install()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    WATCH.item, WATCH.started = item, []
    yield
    WATCH.item = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    outcome = yield
    report = outcome.get_result()
    exempt = bool({MARK, "slow", "heavy"} & set(item.keywords))  # none of them runs in the quick suite
    if call.when == "teardown" and WATCH.started and not exempt and report.passed:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} started {len(WATCH.started)} OS process(es) ({WATCH.started[0]}) "
            f"without the `{MARK}` mark: add `@pytest.mark.{MARK}` (or `pytestmark`) so the quick suite leaves it out"
        )
