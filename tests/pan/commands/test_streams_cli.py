"""`pan streams` and `pan subscribe` against running, missing and mistyped workflows (issue 15, item 2)."""

from __future__ import annotations

import asyncio
import os
import sys

import orjson
import pytest

from pan.http.addresses import free_port
from pan.ingest.server import send_lines
from pan.repository.client import RepositoryClient
from tests.conftest import HOST, Processes, forwarder, repeater, sensor_row, workflow_dict

pytestmark = pytest.mark.process
STREAMS = ["SENSOR4", "SENSOR8"]


async def pan(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "pan", *args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, env=dict(os.environ))
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


async def test_a_missing_repository_is_one_line_not_a_hang() -> None:
    nobody = f"{HOST}:{free_port()}"
    for command in (["subscribe", "NOPE"], ["streams"]):
        code, out, err = await pan(*command, "--repository", nobody, "--connect-timeout", "3")
        assert code == 1 and out == "" and "no repository answered" in one_line(err) and nobody in err
    code, _, err = await pan("streams", "--repository", "localhost")
    assert code == 2 and "--repository" in one_line(err)
    code, _, err = await pan("subscribe", "S", "--workflow", "no/such/workflow.json")
    assert code == 2 and "--workflow" in one_line(err)


async def test_pan_streams_lists_a_running_workflow_and_subscribe_names_what_exists(processes: Processes) -> None:
    specs = [forwarder("F", STREAMS, peer="p1"), repeater("R", ["SENSOR4"], 1, peer="p2")]
    path = processes.write_workflow(workflow_dict(free_port(), specs))
    processes.pan("run", str(path), log_name="run")
    repository = orjson.loads(path.read_bytes())["repository"]
    async with RepositoryClient((HOST, repository["port"]), timeout_s=30) as client:
        await client.wait_for_publishers(["SENSOR4"], 120, publishers=2)
        await client.wait_for_publishers(["SENSOR8"], 120)

    sampled = asyncio.Event()

    async def feed() -> None:
        # Until `pan streams` has taken both samples (on a loaded machine starting it alone can take seconds),
        # 10 rows at a time, so that the forwarder's ring (10,000 tuples) still holds index 0 below.
        n = 0
        while not sampled.is_set() and n < 900:
            await send_lines(HOST, specs[0]["params"]["ingest_port"],
                             [sensor_row(4, n * 10 + k).encode() for k in range(10)], timeout_s=30)
            n += 1
            await asyncio.sleep(0.05)

    feeding = asyncio.create_task(feed())
    code, out, err = await pan("streams", "--workflow", str(path), "--json", "--interval", "1")
    sampled.set()
    await feeding
    assert code == 0, err
    listed = orjson.loads(out)["streams"]
    assert set(listed) == set(STREAMS)
    assert [(p["port"], p["rep"]) for p in listed["SENSOR4"]["publishers"]] == [(specs[0]["port"], False),
                                                                                (specs[1]["port"], True)]
    assert listed["SENSOR4"]["tuples_per_s"] > 0 and listed["SENSOR8"]["tuples_per_s"] == 0
    code, out, _ = await pan("streams", "--workflow", str(path), "--interval", "0")
    assert code == 0 and out.splitlines()[0].split()[:2] == ["STREAM", "LAST"] and "SENSOR8" in out

    code, out, err = await pan("subscribe", "SENSOR9", "--workflow", str(path))
    line = one_line(err)
    assert code == 1 and out == "" and "no publisher of SENSOR9" in line and "SENSOR4" in line
    code, out, err = await pan("subscribe", "SENSOR4", "--workflow", str(path), "--count", "5")
    assert code == 0, err
    assert [orjson.loads(row)["i"] for row in out.splitlines()] == [0, 1, 2, 3, 4]
