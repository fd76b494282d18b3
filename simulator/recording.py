"""The files of a recording: one per stream, JSON lines, plain (``.jsonl``) or zstd-compressed (``.jsonl.zst``).

A whole match recorded as plain JSON lines is about 16 GB, more than half of
it the sensors' own streams, whose noisy numbers compress about 3.5 times;
the aggregates, 20 to 30 times. ``pan replay --compress`` writes zstd frames
at level 1 (300+ MB/s on one core); every reader of a recording goes through
``read_lines``, so it need not know which kind it reads.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

PLAIN = ".jsonl"
COMPRESSED = ".jsonl.zst"
#: zstd level 1: the fastest of the standard levels; higher ones gain little on sensor data and cost 2x the CPU.
LEVEL = 1


def _zstandard() -> Any:
    try:
        import zstandard
    except ImportError as exc:
        raise RuntimeError("a compressed recording needs zstandard: install PAN with the record extra "
                           "(pip install 'pan[record]')") from exc
    return zstandard


def can_compress() -> bool:
    """Whether zstandard is installed (the record extra)."""
    try:
        _zstandard()
    except RuntimeError:
        return False
    return True


class StreamFile:
    """One stream's file being written, counting the bytes of JSON it was given (before any compression)."""

    def __init__(self, path: Path, compress: bool) -> None:
        self.path = path
        self._file: IO[bytes] = path.open("wb")
        self._writer: Any = _zstandard().ZstdCompressor(level=LEVEL).stream_writer(self._file) if compress else None
        self.json_bytes = 0

    def write(self, data: bytes) -> None:
        self.json_bytes += len(data)
        (self._writer or self._file).write(data)

    def writelines(self, parts: Iterable[bytes]) -> None:
        for part in parts:
            self.write(part)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()  # ends the frame and closes the file
        else:
            self._file.close()


def stream_file(folder: Path, stream: str, compress: bool) -> StreamFile:
    return StreamFile(folder / f"{stream}{COMPRESSED if compress else PLAIN}", compress)


def recorded_files(folder: Path) -> dict[str, Path]:
    """Stream name -> its file, for every stream recorded in ``folder`` (either kind)."""
    files = {path.name.removesuffix(PLAIN): path for path in folder.glob(f"*{PLAIN}")}
    files |= {path.name.removesuffix(COMPRESSED): path for path in folder.glob(f"*{COMPRESSED}")}
    return files


def read_lines(path: Path) -> Iterator[bytes]:
    """The JSON lines of one stream's file, without their newlines."""
    with path.open("rb") as raw:
        source: IO[bytes] = raw
        if path.name.endswith(COMPRESSED):
            source = io.BufferedReader(_zstandard().ZstdDecompressor().stream_reader(raw))
        for line in source:
            yield line.rstrip(b"\n")
