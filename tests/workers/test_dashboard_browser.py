"""`pan dashboard` in headless Chromium, against the 3-peer full-game workflow fed a short match (issue 16).

The network runs as `pan run` with `pan simulate` feeding it, not as `pan replay`: a replay stops the
workflow when the data ends, and the checks after it (the final possession, a heat map chosen later, the
network view, a restarted dashboard) need the workers still serving. The page exposes what it drew as
data attributes (positions on the pitch canvas, the possession per window, the heat map's stream and
index, each worker's K), which the test compares with what PAN itself serves.

Needs Debian's `chromium` and `chromium-driver` (`make chromium` installs them); skipped, saying so,
where they are missing. Screenshots go to the test's folder, and to ``$PAN_SCREENSHOTS`` when set
(``PAN_SCREENSHOTS=docs/img`` renews the README's).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import orjson
import pytest

from benchmarks.chromium import one_chromium
from benchmarks.query_delay import plain_split
from pan.http.addresses import free_port
from pan.repository.client import RepositoryClient
from pan.workflow.parser import on_free_ports
from tests.conftest import ROOT, Processes
from workers.sparse_heatmap import dense

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

T = TypeVar("T")
MINUTES = "0.3"
SEED = "7"
SPEEDUP = "1"  # about 25 s of feed: time enough for two screenshots while the players move
WAIT_S = 120.0
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
UNORDERED_TYPES = {"forwarder", "repeater"}  # every other worker of the full game has an ordering unit


def wait_for(what: str, probe: Callable[[], T], timeout_s: float = WAIT_S) -> T:
    """Poll ``probe`` until it returns something true; fail naming ``what`` and the last value."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except Exception as exc:  # a page being redrawn may lose an element between two calls
            last = exc
        else:
            if last:
                return last
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout_s:.0f} s (last: {last!r})")


def newest(repository: tuple[str, int], stream: str) -> dict[str, Any] | None:
    """The newest tuple of a stream, as PAN serves it (not through the dashboard)."""

    async def read() -> dict[str, Any] | None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            source = await RepositoryClient(repository, session=session).lookup(stream)
            async with session.get(source.url("/data"), params={"s": stream, "l": "1"}) as response:
                tuples = orjson.loads(await response.read())["tuples"]
        return tuples[-1] if tuples else None

    return asyncio.run(read())


@pytest.fixture(scope="module")
def split(tmp_path_factory: pytest.TempPathFactory) -> Path:
    game = tmp_path_factory.mktemp("dashboard") / "game"
    subprocess.run([sys.executable, "-m", "pan", "generate", "--minutes", MINUTES, "--seed", SEED, "--out",
                    str(game)], cwd=ROOT, check=True, capture_output=True, timeout=600)
    return plain_split(game, game.parent / "split")


@pytest.fixture
def browser() -> Iterator[Any]:
    if CHROMIUM is None or DRIVER is None:
        pytest.skip("needs Debian's chromium and chromium-driver (`make chromium`, or apt-get install chromium "
                    "chromium-driver)")
    pytest.importorskip("selenium.webdriver", reason="needs selenium (the extra 'dashboard')")
    with one_chromium() as driver:  # headless, 1300x1000: the whole match view on screen
        yield driver


class Page:
    """What the dashboard drew, read from the DOM."""

    def __init__(self, driver: Any, shots: Path) -> None:
        self.driver = driver
        self.shots = shots

    def attr(self, element_id: str, name: str) -> str:
        return self.driver.find_element("id", element_id).get_attribute(name) or ""

    def positions(self) -> dict[str, list[float]]:
        return json.loads(self.attr("pitch", "data-positions") or "{}")

    def possession(self, window: str) -> str:
        return self.driver.find_element("css selector", f'#possession [data-window="{window}"]').get_attribute(
            "data-a") or ""

    def choose(self, select_id: str, value: str) -> None:
        from selenium.webdriver.support.ui import Select

        Select(self.driver.find_element("id", select_id)).select_by_visible_text(value)

    def screenshot(self, name: str, *, for_readme: bool = True) -> None:
        path = self.shots / f"dashboard-{name}.png"
        self.driver.save_screenshot(str(path))
        if for_readme and os.environ.get("PAN_SCREENSHOTS"):
            shutil.copy(path, Path(os.environ["PAN_SCREENSHOTS"]) / path.name)


def start_dashboard(processes: Processes, workflow: Path, port: int) -> subprocess.Popen[bytes]:
    proc = processes.pan("dashboard", "--workflow", str(workflow), "--port", str(port), log_name="dashboard")

    def healthy() -> bool:
        assert proc.poll() is None, "the dashboard exited"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
                return response.status == 200
        except OSError:
            return False

    wait_for("the dashboard answers /health", healthy)
    return proc


def test_the_dashboard_shows_the_match_and_the_network_live(split: Path, processes: Processes, browser: Any,
                                                              tmp_path: Path) -> None:
    described = on_free_ports(json.loads((ROOT / "workflows" / "full_game_3_peers.json").read_text()))
    workflow = processes.write_workflow(described)
    repository = (described["repository"]["host"], described["repository"]["port"])
    run = processes.pan("run", str(workflow), log_name="run")
    port = free_port()
    dashboard = start_dashboard(processes, workflow, port)  # it waits for publishers by itself
    wait_for("every peer runs", lambda: (tmp_path / "run-0.log").read_text().count("worker(s) running") >= 3
             or (run.poll() is not None and pytest.fail((tmp_path / "run-0.log").read_text()[-3000:])))
    page = Page(browser, tmp_path)
    browser.get(f"http://127.0.0.1:{port}/")
    wait_for("the page connects", lambda: page.attr("status", "data-connected") == "true")
    loaded = browser.execute_script("return window.panPageLoad")
    assert browser.execute_script("return window.panTrace === undefined")  # the benchmark's hook is off by default

    # The match moves: 16 players and the ball drawn, at other places in a later screenshot.
    feed = processes.pan("simulate", "--workflow", str(workflow), "--data", str(split), "--speedup", SPEEDUP,
                         "--skip-halftime", log_name="simulate")
    first = wait_for("16 players and the ball drawn", lambda: page.attr("pitch", "data-players") == "16"
                     and page.attr("pitch", "data-ball") == "1" and page.positions())
    page.screenshot("match-1", for_readme=False)
    second = wait_for("the players move", lambda: (p := page.positions()) and p != first and
                      sum(p[k] != first.get(k) for k in p) >= 8 and p)
    assert sum(bool(re.fullmatch("[AB][1-8]", k)) for k in second) == 16 and "BALL" in second
    page.screenshot("match")

    # Team possession equals PAN's last BP_wholeGame_A once the feed is over.
    assert feed.wait(timeout=600) == 0, (tmp_path / "simulate-2.log").read_text()[-3000:]

    def possession_agrees() -> tuple[float, float] | None:
        last = newest(repository, "BP_wholeGame_A")
        shown = page.possession("wholeGame")
        if last is None or not shown:
            return None
        pair = (float(shown), float(last["time_percent"]))
        return pair if abs(pair[0] - pair[1]) <= 0.1 else None

    wait_for("the possession shown equals the last BP_wholeGame_A", possession_agrees)

    # Another player and grid: the heat map is redrawn from that player's stream, its newest tuple.
    page.choose("hm-player", "B3")
    page.choose("hm-grid", "8x13")
    chosen = "HM_wholeGame_8x13_B3"

    def heat_map_drawn() -> bool:
        last = newest(repository, chosen)
        return (last is not None and page.attr("heatmap", "data-stream") == chosen
                and page.attr("heatmap", "data-cells") == str(8 * 13) and page.attr("heatmap", "data-i") == str(
                    last["i"]) and page.attr("heatmap", "data-max") == str(max(1, int(dense(last).max())))
                and page.attr("heatmap", "data-sum") == str(int(dense(last).sum())))

    wait_for(f"the heat map drawn from {chosen}", heat_map_drawn)
    page.screenshot("heatmap")

    # The network view: every worker of the workflow, with a K for each ordered one.
    browser.find_element("id", "tab-network").click()
    names = {w["name"]: w["type"] for w in described["workers"]}

    def workers_listed() -> dict[str, str]:
        rows = browser.find_elements("css selector", "#net-workers tr[data-worker]")
        listed = {row.get_attribute("data-worker"): row.get_attribute("data-k") for row in rows}
        complete = listed.keys() == names.keys() and all(
            listed[name] != "" for name, kind in names.items() if kind not in UNORDERED_TYPES)
        return listed if complete else {}

    listed = wait_for("every worker listed, with K where ordered", workers_listed)
    assert all(int(k) >= 0 for name, k in listed.items() if names[name] not in UNORDERED_TYPES)
    page.screenshot("network")

    # The dashboard restarts: the page reconnects to the new server by itself, without a reload.
    old_server = page.attr("status", "data-server")
    dashboard.send_signal(signal.SIGTERM)
    assert dashboard.wait(timeout=60) == 0
    wait_for("the page notices", lambda: page.attr("status", "data-connected") == "false")
    start_dashboard(processes, workflow, port)
    wait_for("the page reconnects to the new server", lambda: page.attr("status", "data-connected") == "true"
             and page.attr("status", "data-server") not in ("", old_server))
    frames = int(page.attr("status", "data-frames"))
    wait_for("frames come from the new server", lambda: int(page.attr("status", "data-frames")) > frames)
    assert browser.execute_script("return window.panPageLoad") == loaded  # the same page, not reloaded
    browser.find_element("id", "tab-match").click()
    wait_for("the match is drawn again", lambda: page.attr("pitch", "data-players") == "16")
