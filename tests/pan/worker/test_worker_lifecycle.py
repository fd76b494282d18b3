"""The worker's lifecycle: one task group owns its tasks; a failing task is logged and ends alone."""

from __future__ import annotations

import asyncio
import logging

import pytest

from pan.components.base import Component
from pan.components.catalog import register
from pan.config.specs import WorkerSpec
from pan.http.addresses import free_port
from pan.repository.server import RepositoryServer
from pan.worker.worker import Worker
from pan.workflow.health import failed_tasks
from tests.conftest import WorkerGroup, forwarder, get_json, make_workflow, wait_until


@register
class Crashing(Component):
    """Fails as soon as it runs: the worker must go on pulling and serving."""

    type_name = "test_crashing"

    @classmethod
    def output_names(cls, spec: WorkerSpec) -> list[str]:
        return [f"{spec.name}_out"]

    async def run(self) -> None:
        raise RuntimeError("component bug")


def tasks_of(worker: Worker) -> list[asyncio.Task]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith(f"{worker.spec.name}: ")]


async def test_a_failing_component_is_logged_and_the_pull_goes_on(
    repository: RepositoryServer, workers: WorkerGroup, caplog: pytest.LogCaptureFixture
) -> None:
    workflow = make_workflow(repository.port, [
        forwarder("F", ["S"]),
        {"name": "C", "type": "test_crashing", "host": "127.0.0.1", "port": free_port(), "peer": "p", "inputs": ["S"]},
    ])
    caplog.set_level(logging.ERROR, logger="pan.worker.worker.C")
    fwd, crashing = await workers.start(workflow)
    await wait_until(lambda: "task 'C: component' failed" in caplog.text)
    fwd.outputs["S"].extend([{"ts": n} for n in range(5)])
    await wait_until(lambda: crashing.inputs["S"].counters.received == 5, timeout_s=30)
    status, info = await get_json(f"http://127.0.0.1:{crashing.server.port}/streams")
    assert status == 200 and info["inputs"]["S"]["received"] == 5
    # ... but it does not pass for healthy: a dead component looks like a quiet stream otherwise
    assert info["status"] == "failing" and info["failed_tasks"] == {"C: component": "RuntimeError: component bug"}
    status, health = await get_json(f"http://127.0.0.1:{crashing.server.port}/health")
    assert status == 503 and health["status"] == "failing" and "C: component" in health["failed_tasks"]
    status, health = await get_json(f"http://127.0.0.1:{fwd.server.port}/health")
    assert status == 200 and health["status"] == "ok" and "failed_tasks" not in health
    assert await failed_tasks(workflow) == {"C": {"C: component": "RuntimeError: component bug"}}
    names = {t.get_name() for t in tasks_of(crashing)}
    assert {"C: tasks", "C: pull S", "C: refresh"} <= names and "C: component" not in names

    await crashing.stop()
    workers.workers.remove(crashing)
    assert tasks_of(crashing) == []  # every task the worker started has ended with it
