"""What a workflow describes: its workers, inputs, outputs and repositories.

A public path kept for users (README, "Writing a component"); the code lives in ``pan.config.specs``.
"""

from pan.config.specs import (
    DEFAULT_REFRESH_MS,
    RepositorySpec,
    WorkerSpec,
    Workflow,
    WorkflowError,
    ingest_port,
    inter_pan_inputs,
)

__all__ = [
    "DEFAULT_REFRESH_MS",
    "RepositorySpec",
    "WorkerSpec",
    "Workflow",
    "WorkflowError",
    "ingest_port",
    "inter_pan_inputs",
]
