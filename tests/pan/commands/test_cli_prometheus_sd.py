"""`pan run --prometheus-sd FILE`: Prometheus file_sd targets for every /metrics of the workflow (issue 15, item 5)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import orjson
import pytest

from pan.launch.lifeline import shared_lifeline
from tests.conftest import HOST, ROOT
from tests.pan.launch.test_process_lifetime import healthy, write_workflow
from tests.support.prometheus import samples

pytestmark = pytest.mark.process


def test_the_targets_list_every_metrics_endpoint_and_each_answers(tmp_path: Path) -> None:
    path, ports = write_workflow(tmp_path)
    workflow = orjson.loads(path.read_bytes())
    sd = tmp_path / "prometheus" / "pan.json"
    log = tmp_path / "run.log"
    with log.open("wb") as out:
        run = subprocess.Popen([sys.executable, "-m", "pan", "run", str(path), "--prometheus-sd", str(sd)],
                               cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, **shared_lifeline().spawn_options())
    try:
        deadline = time.monotonic() + 120
        while not all(healthy(port) for port in ports[:3]):
            assert run.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        groups = json.loads(sd.read_text())
        by_target = {group["targets"][0]: group["labels"] for group in groups}
        assert all(len(group["targets"]) == 1 for group in groups)
        repository = f"{HOST}:{workflow['repository']['port']}"
        assert by_target[repository]["role"] == "repository"
        for worker in workflow["workers"]:
            labels = by_target[f"{worker['host']}:{worker['port']}"]
            assert labels == {"workflow": workflow["name"], "role": "worker", "peer": worker["peer"],
                              "worker": worker["name"], "type": worker["type"], "__scheme__": "http"}
        assert len(by_target) == 1 + len(workflow["workers"])
        for target in by_target:
            with urllib.request.urlopen(f"http://{target}/metrics", timeout=30) as answer:
                assert answer.status == 200 and samples(answer.read().decode())
    finally:
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=120)
    assert run.returncode == 0, log.read_text()[-2000:]
