"""The send log of a sensor simulation (``simulator/simulate.py``): when each row went out, for the query delay."""

from __future__ import annotations

from pathlib import Path


class SendLog:
    """CSV ``stream,ts,send_ns`` per sent row: the sensor side of the query-delay metric."""

    def __init__(self, path: Path) -> None:
        self._file = open(path, "w", buffering=1 << 20)  # noqa: SIM115 (closed by close())
        self._file.write("stream,ts,send_ns\n")

    def record(self, stream: str, ts: list[int], send_ns: int) -> None:
        prefix, suffix = stream + ",", f",{send_ns}\n"
        self._file.write("".join([prefix + str(t) + suffix for t in ts]))

    def close(self) -> None:
        self._file.close()
