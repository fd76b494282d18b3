"""Workflow loading and validation, through the loader and `pan validate`."""

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from pan.cli import main
from pan.config.specs import WorkflowError
from pan.http.addresses import free_port, free_ports
from pan.workflow.parser import load_workflow, on_free_ports, parse_workflow

ROOT = Path(__file__).resolve().parents[3]

VALID: dict[str, Any] = {
    "name": "ok",
    "repository": {"host": "127.0.0.1", "port": 8080},
    "workers": [
        {
            "name": "Forwarder 1",
            "type": "forwarder",
            "host": "127.0.0.1",
            "port": 51001,
            "peer": "peer1",
            "buffer_size": 10000,
            "params": {"ingest_port": 50001, "inter_pan_inputs": ["SENSOR4", "SENSOR8"], "decoder": "debs_csv"},
        },
        {
            "name": "Repeater 1",
            "type": "repeater",
            "host": "127.0.0.1",
            "port": 51002,
            "peer": "peer2",
            "inputs": ["SENSOR4", "SENSOR8"],
            "params": {"level": 1},
        },
    ],
}


def broken(change: Any) -> dict[str, Any]:
    data = copy.deepcopy(VALID)
    change(data)
    return data


# Each case: (description, file content, words the error must contain)
CASES: list[tuple[str, Any, list[str]]] = [
    ("bad JSON", '{"name": "x", "workers": [', ["bad JSON"]),
    ("not an object", "[1, 2]", ["must be a JSON object"]),
    ("no workers", broken(lambda d: d.pop("workers")), ["'workers'"]),
    ("missing key", broken(lambda d: d["workers"][0].pop("port")), ["Forwarder 1", "missing required key 'port'"]),
    ("unknown key", broken(lambda d: d["workers"][1].update(colour="red")), ["Repeater 1", "unknown key 'colour'"]),
    ("unknown top-level key", broken(lambda d: d.update(extra=1)), ["workflow", "unknown key 'extra'"]),
    (
        "wrong type",
        broken(lambda d: d["workers"][0].update(port="51001")),
        ["Forwarder 1", "'port'", "integer"],
    ),
    (
        "wrong list type",
        broken(lambda d: d["workers"][1].update(inputs="SENSOR4")),
        ["Repeater 1", "'inputs'", "array"],
    ),
    (
        "duplicate ports",
        broken(lambda d: d["workers"][1].update(port=51001)),
        ["Repeater 1", "'port'", "already used by worker 'Forwarder 1'"],
    ),
    (
        "ingest port clashes with an http port",
        broken(lambda d: d["workers"][0]["params"].update(ingest_port=51002)),
        ["'port'", "already used"],
    ),
    ("unknown worker type", broken(lambda d: d["workers"][1].update(type="teleporter")), ["unknown worker type"]),
    (
        "input nobody produces",
        broken(lambda d: d["workers"][1].update(inputs=["SENSOR4", "SENSOR99"])),
        ["Repeater 1", "'inputs'", "SENSOR99", "produced by no worker"],
    ),
    (
        "bad component params",
        broken(lambda d: d["workers"][1].update(params={"level": 0})),
        ["Repeater 1", "params.level"],
    ),
    (
        "ingest port without streams",
        broken(lambda d: d["workers"][0]["params"].pop("inter_pan_inputs")),
        ["Forwarder 1", "'ingest_port' and 'inter_pan_inputs'"],
    ),
    (
        "duplicate worker names",
        broken(lambda d: d["workers"][1].update(name="Forwarder 1")),
        ["duplicate worker name"],
    ),
    (
        "two original producers of one stream",
        broken(
            lambda d: d["workers"].append(
                {
                    "name": "Forwarder 2",
                    "type": "forwarder",
                    "host": "127.0.0.1",
                    "port": 51003,
                    "params": {"ingest_port": 50003, "inter_pan_inputs": ["SENSOR4"]},
                }
            )
        ),
        ["Forwarder 2", "SENSOR4", "already produced by worker 'Forwarder 1'"],
    ),
    (
        "repository port out of range",
        broken(lambda d: d["repository"].update(port=0)),
        ["repository", "'port'"],
    ),
    ("buffer size zero", broken(lambda d: d["workers"][0].update(buffer_size=0)), ["'buffer_size'"]),
]


def write(tmp_path: Path, content: Any) -> Path:
    path = tmp_path / "wf.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def test_valid_workflow_loads(tmp_path: Path) -> None:
    workflow = load_workflow(write(tmp_path, VALID))
    assert [w.name for w in workflow.workers] == ["Forwarder 1", "Repeater 1"]
    assert workflow.peers().keys() == {"peer1", "peer2"}
    assert workflow.workers[1].params == {"level": 1}
    assert workflow.ingest_receiver("SENSOR8").name == "Forwarder 1"


@pytest.mark.parametrize(("description", "content", "needles"), CASES, ids=[c[0] for c in CASES])
def test_broken_workflows_are_rejected_with_a_message_naming_the_problem(
    tmp_path: Path, description: str, content: Any, needles: list[str]
) -> None:
    with pytest.raises(WorkflowError) as caught:
        load_workflow(write(tmp_path, content))
    text = "\n".join(caught.value.problems)
    for needle in needles:
        assert needle in text, f"{description}: {needle!r} not in {text!r}"


def test_all_problems_are_reported_at_once(tmp_path: Path) -> None:
    data = broken(lambda d: (d["workers"][0].update(colour=1), d["workers"][1].update(port="x")))
    with pytest.raises(WorkflowError) as caught:
        load_workflow(write(tmp_path, data))
    assert len(caught.value.problems) == 2


def test_every_class_of_problem_is_reported_in_one_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Field problems do not hide cross-worker ones: an unknown key and a duplicate port come together."""

    def change(d: dict[str, Any]) -> None:
        d["workers"][1].update(colour="red", port=51001)  # unknown key and a port the forwarder uses
        d["workers"][0].update(buffer_size=0)  # a field problem on the other worker
        d["workers"].append(
            {
                "name": "Repeater 1",  # a name used twice
                "type": "repeater",
                "host": "127.0.0.1",
                "port": 51004,
                "inputs": ["SENSOR4"],
                "params": {"level": 0},  # refused by the component
            }
        )
        d["workers"].append(
            {"name": "Repeater 3", "type": "repeater", "host": "127.0.0.1", "port": 51005, "inputs": ["SENSOR99"]}
        )

    path = write(tmp_path, broken(change))
    with pytest.raises(WorkflowError) as caught:
        load_workflow(path)
    problems = caught.value.problems
    expected = [
        "'buffer_size'",
        "unknown key 'colour'",
        "params.level",
        "duplicate worker name",
        "port 127.0.0.1:51001 already used by worker 'Forwarder 1'",
        "'SENSOR99' is produced by no worker",
    ]
    for needle in expected:
        assert sum(needle in p for p in problems) == 1, f"{needle!r} not reported once in {problems}"
    assert len(problems) == len(expected), problems  # and nothing invented besides
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    for needle in expected:
        assert needle in err


def test_a_key_with_a_problem_adds_no_false_topology_problems(tmp_path: Path) -> None:
    """A worker whose type or inputs are unreadable says nothing about streams it might produce."""
    data = broken(lambda d: (d["workers"][0].update(type="teleporter"), d["workers"][1].update(port="51001")))
    with pytest.raises(WorkflowError) as caught:
        load_workflow(write(tmp_path, data))
    problems = caught.value.problems
    assert len(problems) == 2, problems
    assert "unknown worker type" in problems[0] and "'port'" in problems[1]


def test_pan_validate_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(write(tmp_path, VALID))]) == 0
    assert "ok" in capsys.readouterr().out
    assert main(["validate", str(write(tmp_path, broken(lambda d: d["workers"][0].pop("type"))))]) == 1
    assert "missing required key 'type'" in capsys.readouterr().err
    assert main(["validate", str(tmp_path / "missing.json")]) == 1
    assert "cannot read file" in capsys.readouterr().err


SHIPPED = [p for p in sorted((ROOT / "workflows").glob("*.json")) if "workers" in json.loads(p.read_text())]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_workflows_are_valid(path: Path) -> None:
    load_workflow(path)


def test_free_port_called_again_and_again_never_repeats_a_port() -> None:
    """Tests build workflows port by port; the kernel may hand a just-released port to the next bind (CI saw a
    forwarder get its own HTTP port as its ingest port). 2,000 draws from ~28,000 ephemeral ports would repeat
    one about 70 times by chance."""
    ports = [free_port() for _ in range(2000)] + free_ports(50)
    assert len(set(ports)) == len(ports)


def test_free_ports_of_a_large_workflow_are_all_different() -> None:
    """Ports are picked together, so two workers can never be handed the same one."""
    data = json.loads((ROOT / "workflows" / "full_game_14_peers.json").read_text())
    moved = on_free_ports(data)
    ports = [moved["repository"]["port"]]
    for worker in moved["workers"]:
        params = worker.get("params", {})
        ports += [worker["port"], *([params["ingest_port"]] if "ingest_port" in params else [])]
    assert len(ports) == len(set(ports)) >= 18
    assert parse_workflow(moved).workers  # and the result is still a valid workflow


@pytest.mark.parametrize("every", [0, -5, "10", True, 7200])
def test_a_checkpoint_period_must_be_seconds_of_event_time(every: object) -> None:
    with pytest.raises(WorkflowError) as refused:
        parse_workflow({**copy.deepcopy(VALID), "checkpoint_s": every})
    assert any(p.startswith("checkpoint_s: must be a number of seconds of event time in (0, 3600]")
               for p in refused.value.problems), refused.value.problems


def test_a_checkpoint_period_is_kept() -> None:
    assert parse_workflow({**copy.deepcopy(VALID), "checkpoint_s": 30}).checkpoint_s == 30.0
    assert parse_workflow(copy.deepcopy(VALID)).checkpoint_s is None
