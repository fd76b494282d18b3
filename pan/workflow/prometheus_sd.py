"""Prometheus file-based service discovery for a workflow: every `/metrics` endpoint with its labels.

`pan run --prometheus-sd FILE` writes it; a Prometheus ``file_sd_configs`` entry naming FILE then scrapes every
worker and repository without listing them by hand, and picks up a new workflow when the file is rewritten.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pan.config.specs import Workflow


def _target(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def targets(workflow: Workflow) -> list[dict[str, Any]]:
    """One file_sd target group per endpoint: ``{"targets": ["host:port"], "labels": {...}}``.

    Labels: ``workflow``, ``role`` (``repository`` or ``worker``), ``peer`` and ``worker`` (the repository's
    address names it; it runs on no peer), ``type`` (the component); ``__scheme__`` is ``https`` when the workflow
    has TLS. A worker serves ``/metrics`` on its HTTP port, the repository on its own.
    """
    scheme = "https" if workflow.tls is not None else "http"
    groups = [
        {"targets": [_target(r.host, r.port)],
         "labels": {"workflow": workflow.name, "role": "repository", "peer": "", "worker": r.address,
                    "type": "repository", "__scheme__": scheme}}
        for r in workflow.repositories
    ]
    groups += [
        {"targets": [_target(w.host, w.port)],
         "labels": {"workflow": workflow.name, "role": "worker", "peer": w.peer, "worker": w.name, "type": w.type,
                    "__scheme__": scheme}}
        for w in workflow.workers
    ]
    return groups


def write(path: Path, workflow: Workflow) -> None:
    """Write the targets atomically (Prometheus watches the file and must never read half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(targets(workflow), indent=1) + "\n")
    os.replace(partial, path)
