"""A target for speculative ordering units in tests: its state is every event it processed, in order."""

from __future__ import annotations

import json


class Detector:
    """A target whose state is every event name it processed, in order; it logs emits and restores."""

    def __init__(self) -> None:
        self.state: list[str] = []
        self.log: list[tuple[str, str | None]] = []

    def snapshot(self) -> bytes:
        return json.dumps(self.state).encode()

    def restore(self, snapshot: bytes) -> None:
        self.state = json.loads(snapshot)
        self.log.append(("restore", self.state[-1] if self.state else None))

    def process(self, events: list[dict]) -> None:
        for event in events:
            self.state.append(event["n"])
            self.log.append(("emit", event["n"]))
