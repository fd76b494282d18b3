"""Headless Chromium instances driven by selenium, for benchmarks that need a real browser in the loop.

Each instance is a chromedriver and a Chromium of its own (browser, renderer and GPU processes). They are
started together and always quit together (`Chromiums` is a context manager), so a failing benchmark leaves
no browser behind. Needs Debian's ``chromium`` and ``chromium-driver`` (`make chromium`) and selenium (the
extra ``dashboard``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from types import TracebackType
from typing import Any

WINDOW = "--window-size=1300,1000"  # as the browser test: the whole match view on screen


def missing() -> str | None:
    """Why no browser can be started here, or None."""
    if shutil.which("chromium") is None or shutil.which("chromedriver") is None:
        return "needs Debian's chromium and chromium-driver (`make chromium`)"
    try:
        import selenium.webdriver  # noqa: F401
    except ImportError:
        return "needs selenium (pip install -e '.[dashboard]')"
    return None


def start_one(tmp: str) -> Any:
    """A headless Chromium whose temporary files go to ``tmp`` (its ``TMPDIR``): Chromium leaves an empty
    directory of its own in the temporary folder, which the caller removes with ``tmp`` after ``quit()``."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", WINDOW):
        options.add_argument(argument)
    service = Service(shutil.which("chromedriver") or "chromedriver", env={**os.environ, "TMPDIR": tmp})
    return webdriver.Chrome(service=service, options=options)


@contextlib.contextmanager
def one_chromium() -> Iterator[Any]:
    """One headless Chromium, quit at the end with its temporary files."""
    tmp = tempfile.mkdtemp(prefix="pan-chromium-")
    try:
        driver = start_one(tmp)
        try:
            yield driver
        finally:
            driver.quit()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class Chromiums:
    """``count`` headless Chromium instances, started one after another (Chromium's start is CPU-heavy)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.drivers: list[Any] = []
        self._tmp = tempfile.mkdtemp(prefix="pan-chromium-")  # every instance's temporary files, removed at quit
        self._locks: dict[int, asyncio.Lock] = {}  # one command at a time per driver (selenium's pool holds one)

    async def __aenter__(self) -> Chromiums:
        try:
            for _ in range(self.count):
                self.drivers.append(await asyncio.to_thread(start_one, self._tmp))
        except BaseException:
            await self._quit()
            raise
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._quit()

    async def _quit(self) -> None:
        for driver in self.drivers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.to_thread(driver.quit), 60)
        self.drivers = []
        shutil.rmtree(self._tmp, ignore_errors=True)

    async def open(self, drivers: list[Any], url: str) -> None:
        """Load ``url`` in each of ``drivers`` at once."""
        await asyncio.gather(*(asyncio.wait_for(asyncio.to_thread(d.get, url), 120) for d in drivers))

    async def script(self, driver: Any, code: str) -> Any:
        async with self._locks.setdefault(id(driver), asyncio.Lock()):
            return await asyncio.wait_for(asyncio.to_thread(driver.execute_script, code), 60)
