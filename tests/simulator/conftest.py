"""Fixtures of the simulator's tests: a forwarder that receives every stream of ``small_match``, a TCP recorder."""

from __future__ import annotations

import pytest

from pan.config.specs import Workflow
from pan.repository.server import RepositoryServer
from pan.worker.worker import Worker
from tests.conftest import WorkerGroup, forwarder, make_workflow
from tests.simulator.split_folders import ALL
from tests.simulator.tcp_recorder import Recorder


@pytest.fixture
async def fwd(repository: RepositoryServer, workers: WorkerGroup) -> tuple[Worker, Workflow]:
    workflow = make_workflow(repository.port, [forwarder("F", ALL, buffer_size=100_000)])
    (worker,) = await workers.start(workflow)
    return worker, workflow


@pytest.fixture
async def recorder() -> Recorder:
    rec = Recorder()
    await rec.start()
    yield rec
    await rec.stop()
