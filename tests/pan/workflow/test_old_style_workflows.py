"""Forwarder keys in params: the shipped workflows use the new place, old-style files still load and run."""

import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from pan.config.specs import ingest_port, inter_pan_inputs
from pan.ingest.server import send_lines
from pan.repository.server import RepositoryServer
from pan.workflow.parser import load_workflow, parse_workflow
from tests.conftest import HOST, ROOT, WorkerGroup, free_port, sensor_row, wait_until, workflow_dict

WARNING = (
    "worker 'f1': 'ingest_port' moved to params.ingest_port, 'inter_pan_inputs' moved to params.inter_pan_inputs, "
    "its non-JSON rows are read by the 'debs_csv' decoder: set params.decoder"
)


def old_style_forwarder(name: str = "f1", streams: list[str] | None = None) -> dict[str, Any]:
    """A forwarder as workflow files gave it before its keys moved into params."""
    return {"name": name, "type": "forwarder", "host": HOST, "port": free_port(), "ingest_port": free_port(),
            "inter_pan_inputs": streams or ["SENSOR4", "EVENTS"], "params": {"idle_after_ms": 0}}


def shipped_workflows() -> list[Path]:
    return [path for path in sorted((ROOT / "workflows").glob("*.json")) if "workers" in json.loads(path.read_text())]


@pytest.mark.parametrize("path", shipped_workflows(), ids=lambda p: p.name)
def test_shipped_workflows_keep_forwarder_keys_in_params(path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an old-style file would warn
        workflow = load_workflow(path)
    forwarders = [spec for spec in workflow.workers if spec.type == "forwarder"]
    assert forwarders
    for spec in forwarders:
        assert ingest_port(spec) is not None and inter_pan_inputs(spec)
        assert spec.params["decoder"] == "debs_csv"


def test_an_old_style_workflow_loads_with_one_warning_naming_each_moved_key(caplog: pytest.LogCaptureFixture) -> None:
    data = workflow_dict(free_port(), [old_style_forwarder()])
    with pytest.warns(DeprecationWarning) as caught:
        workflow = parse_workflow(data, "old.json")
    assert [str(w.message) for w in caught] == [f"old.json: old-style workflow: {WARNING}"]
    assert [r.getMessage() for r in caplog.records if r.name == "pan.workflow.parser"] == [str(caught[0].message)]
    spec = workflow.worker("f1")
    assert spec.params == {"idle_after_ms": 0, "ingest_port": data["workers"][0]["ingest_port"],
                           "inter_pan_inputs": ["SENSOR4", "EVENTS"], "decoder": "debs_csv"}
    assert workflow.ingest_receiver("EVENTS") is spec


def test_a_key_given_both_at_the_top_and_in_params_is_a_problem() -> None:
    worker = old_style_forwarder()
    worker["params"]["ingest_port"] = free_port()
    with pytest.warns(DeprecationWarning), pytest.raises(Exception, match="'ingest_port' is given twice"):
        parse_workflow(workflow_dict(free_port(), [worker]))


async def test_an_old_style_forwarder_receives_rows_over_tcp(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    data = workflow_dict(repository.port, [old_style_forwarder()])
    with pytest.warns(DeprecationWarning, match="moved to params.ingest_port"):
        workflow = parse_workflow(data)
    (forwarder,) = await workers.start(workflow)
    await send_lines(HOST, data["workers"][0]["ingest_port"],
                     [sensor_row(4, 100).encode(), b'{"stream": "EVENTS", "ts": 7, "kind": "start"}'])
    await wait_until(lambda: forwarder.component.counters()["rows"] == 2)
    assert forwarder.component.counters()["malformed"] == 0
    sensor = forwarder.outputs["SENSOR4"].buffer.read(-1, oldest=10).items
    assert [json.loads(item)["ts"] for item in sensor] == [100]
    assert [json.loads(item) for item in forwarder.outputs["EVENTS"].buffer.read(-1, oldest=10).items] == [
        {"ts": 7, "kind": "start", "i": 0}]


@pytest.mark.process
def test_pan_validate_shows_the_warning(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps(workflow_dict(free_port(), [old_style_forwarder()])))
    done = subprocess.run([sys.executable, "-m", "pan", "validate", str(path)], capture_output=True, text=True,
                          timeout=120, check=False, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"{path}: ok" in done.stdout
    assert f"{path}: old-style workflow: {WARNING}" in done.stderr
    assert done.stderr.count("old-style workflow") == 1
