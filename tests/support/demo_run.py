"""`pan run` on the forwarding demo workflow, started and stopped as a user would (Ctrl-C)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

from pan.launch.lifeline import shared_lifeline
from pan.workflow.parser import on_free_ports
from tests.conftest import ROOT


def run_demo_until_every_peer_runs(pan: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[str, int]:
    """``pan + ["run", "wf.json"]`` in ``cwd`` until every peer says it runs, then SIGINT: its log and exit code."""
    data = on_free_ports(json.loads((ROOT / "workflows" / "demo_forwarding.json").read_text()))
    (cwd / "wf.json").write_text(json.dumps(data))
    peers = {w.get("peer", w["name"]) for w in data["workers"]}
    log = cwd / "run.log"
    with log.open("w") as out:
        proc = subprocess.Popen([*pan, "run", "wf.json"], cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                **shared_lifeline().spawn_options(env))
    try:
        deadline = time.monotonic() + 300
        while log.read_text().count("worker(s) running") < len(peers):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    return log.read_text(), proc.returncode
