"""Sensor simulator with OS processes: the `pan simulate` and `pan replay` CLIs, and 60 s of 42 sensors into
two forwarder processes (the acceptance run)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import orjson
import pytest

from pan.config.specs import Workflow
from pan.launch.lifeline import shared_lifeline
from pan.worker.worker import Worker
from simulator.simulate import simulate
from simulator.simulate_options import SimulateOptions
from tests.conftest import ROOT, forwarder, free_port, wait_until
from tests.simulator.split_folders import ALL, T0, rate_rows, small_match, write_split


@pytest.mark.process
async def test_cli_prints_json_summary(fwd: tuple[Worker, Workflow], tmp_path: Path) -> None:
    worker, workflow = fwd
    data = small_match(tmp_path / "split", seconds=0.5)
    wf_path = tmp_path / "wf.json"
    spec = workflow.workers[0]
    wf_path.write_text(json.dumps({
        "name": "t", "repository": {"host": "127.0.0.1", "port": workflow.repository.port},
        "workers": [{"name": "F", "type": "forwarder", "host": "127.0.0.1", "port": spec.port,
                     "params": {"ingest_port": spec.params["ingest_port"], "inter_pan_inputs": ALL,
                                "decoder": "debs_csv"}}]}))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pan", "simulate", "--workflow", str(wf_path), "--data", str(data),
        "--speedup", "0", "--quiet", cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    summary = json.loads(out)
    assert summary["sent"] == 1000 + 100 + 100 + 2 + 50 and summary["lost"] == 0
    assert summary["streams"]["SENSOR4"]["receiver"] == f"127.0.0.1:{spec.params['ingest_port']}"
    await wait_until(lambda: worker.component.counters()["rows"] == 1252)


@pytest.mark.process
async def test_cli_rejects_bad_arguments(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pan", "simulate", "--workflow", str(tmp_path / "missing.json"), "--data",
        str(tmp_path), cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2 and b"cannot read file" in err


@pytest.mark.slow
async def test_all_sensors_60_s_at_speedup_10_arrive_once_in_order(processes, tmp_path: Path) -> None:
    """Acceptance: 42 sensors, 60 s of game time at speedup 10, into two forwarder processes."""
    from tests.conftest import get_json, workflow_dict

    balls = [4, 8, 10, 12]
    others = [13, 14, 97, 98, 47, 16, 49, 88, 19, 52, 53, 54, 23, 24, 57, 58, 59, 28, 61, 62, 99, 100, 63, 64,
              65, 66, 67, 68, 69, 38, 71, 40, 73, 74, 75, 44, 105, 106]
    rows = {sid: rate_rows(T0 + sid, 60, 2000 if sid in balls else 200) for sid in balls + others}
    data = write_split(tmp_path / "split", rows)
    streams = [f"SENSOR{s}" for s in rows]
    specs = [forwarder("F1", streams[:21], buffer_size=130_000, peer="p1"),
             forwarder("F2", streams[21:], buffer_size=130_000, peer="p2")]
    wf = workflow_dict(free_port(), specs)
    path = processes.write_workflow(wf)
    processes.pan("run", str(path))

    async def up() -> bool:
        try:
            for spec in specs:
                if (await get_json(f"http://127.0.0.1:{spec['port']}/health"))[0] != 200:
                    return False
        except OSError:
            return False
        return True

    await wait_until(up, timeout_s=30)
    from pan.workflow.parser import load_workflow

    summary = await simulate(SimulateOptions(load_workflow(path), data, speedup=10.0, check_period_ms=10))
    total = sum(len(v) for v in rows.values())
    assert summary.sent == total and summary.lost == 0 and summary.errors == []
    assert summary.elapsed_s > 5.5  # paced; may take longer when the forwarders cannot keep up
    for spec in specs:
        for stream in spec["params"]["inter_pan_inputs"]:
            want = rows[int(stream.removeprefix("SENSOR"))]
            got: list[int] = []
            while len(got) < len(want):
                status, page = await get_json(f"http://127.0.0.1:{spec['port']}/data", s=stream,
                                              i=len(got) - 1, n=100_000, w=10_000)
                assert status == 200 and page["missed"] == 0
                got.extend(t["ts"] for t in page["tuples"])
            assert got == want, stream


@pytest.mark.process
def test_replay_cli_on_free_ports_records_every_row(tmp_path: Path) -> None:
    """`pan replay --free-ports` moves the shipped workflow off its fixed ports and records everything."""
    import subprocess

    split = tmp_path / "split"
    split.mkdir()
    rows = ROOT.joinpath("workers", "data", "demo_rows.csv").read_text().splitlines()
    by_sensor: dict[str, list[str]] = {}
    for row in rows:
        by_sensor.setdefault(row.split(",", 1)[0], []).append(row)
    for sid, lines in by_sensor.items():
        (split / f"SENSOR{sid}.csv").write_text("\n".join(sorted(lines, key=lambda r: int(r.split(",")[1]))) + "\n")
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "pan", "replay", "--json", str(ROOT / "workflows" / "demo_forwarding.json"),
         "--data", str(split), "--record", str(out), "--free-ports", "--quiet-s", "1"],
        capture_output=True, timeout=120, check=False, cwd=ROOT,
        **shared_lifeline().spawn_options(),  # a killed pytest leaves no replay behind
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    report = orjson.loads(done.stdout)
    moved = orjson.loads((out / "workflow.json").read_bytes())
    shipped = orjson.loads((ROOT / "workflows" / "demo_forwarding.json").read_bytes())
    assert moved["repository"]["port"] != shipped["repository"]["port"]
    assert report["sent"] == len(rows)
    assert sum(report["streams"].values()) == len(rows)
    assert all(len((out / f"SENSOR{sid}.jsonl").read_bytes().splitlines()) == len(lines)
               for sid, lines in by_sensor.items())
