"""Fixtures of the ingest tests: ``fwd``, a real forwarder of the hardening tests (``ingest_forwarder.py``)."""

from __future__ import annotations

import pytest

from pan.repository.server import RepositoryServer
from pan.worker.worker import Worker
from tests.conftest import WorkerGroup
from tests.pan.ingest.ingest_forwarder import EVENTS_SCHEMA, start_forwarder


@pytest.fixture
async def fwd(repository: RepositoryServer, workers: WorkerGroup) -> Worker:
    return await start_forwarder(repository, workers, params={"schemas": {"EVENTS": EVENTS_SCHEMA}})
