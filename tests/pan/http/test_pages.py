"""The HTML pages of repositories and workers (issue 15, item 6): readable, linked, refreshing, escaped."""

from __future__ import annotations

import aiohttp

from pan.repository.server import RepositoryServer
from tests.conftest import HOST, WorkerGroup, forwarder, make_workflow, repeater


async def page(url: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(url, timeout=aiohttp.ClientTimeout(total=30)) as r:
        assert r.status == 200 and r.content_type == "text/html"
        return await r.text()


async def test_the_repository_page_links_every_worker_page_and_each_links_back(
        repository: RepositoryServer, workers: WorkerGroup) -> None:
    hostile = "<script>alert(1)</script>"
    specs = [forwarder("F", ["SENSOR4", hostile]), repeater("R", ["SENSOR4"], 1)]
    await workers.start(make_workflow(repository.port, specs))
    home = await page(f"http://{HOST}:{repository.port}/")
    assert home == await page(f"http://{HOST}:{repository.port}/debug")
    assert '<meta http-equiv="refresh"' in home
    for spec in specs:
        assert f'href="http://{HOST}:{spec["port"]}/debug"' in home
    assert hostile not in home and "&lt;script&gt;" in home
    worker_page = await page(f"http://{HOST}:{specs[1]['port']}/")
    assert f'href="http://{HOST}:{repository.port}/debug"' in worker_page
    assert "<h2>Inputs</h2>" in worker_page and "<td>SENSOR4</td>" in worker_page
    forwarder_page = await page(f"http://{HOST}:{specs[0]['port']}/debug")
    assert hostile not in forwarder_page and "ingest_port" in forwarder_page
