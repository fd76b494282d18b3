"""Checkpoint files: written whole or not at all, checked whole before anything is loaded.

A checkpoint is one file per moment of event time, in the worker's own folder
under the state directory. It is a magic line, one JSON header line (format,
workflow, worker, type, the event time it stands for, the payload's length
and SHA-256) and the payload. Files are numbered in the order they are written. A write goes to a temporary file that is
fsynced and then renamed over, and the folder is fsynced too, so a crash
leaves either the old set of files or the new one, never a half file under
a checkpoint's name. The newest ``keep`` files are kept.

Which checkpoint a worker goes on from: the newest one, unless a lossless reader (a holder) of one of its
outputs had not read up to that checkpoint's output index when the newest one was taken. The worker then goes
on from the newest checkpoint that reader has passed, so that it produces again, under the same indices, what
the reader had not read yet, rather than leaving a gap where the dead process's ring was. Files are kept as long
as they may be needed so.

Loading refuses, in one line, a file that is truncated, corrupt (its hash
differs), of another format, or of another worker or workflow; nothing of it
is returned. The payload is a pickle: the state directory must be as
trusted as the code (only the user who runs the workers may write it).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

import orjson

MAGIC = b"PAN-CHECKPOINT\n"
FORMAT = 1
SUFFIX = ".ckpt"
DEFAULT_KEEP = 3
#: A sequence number, then the event time (ps): sorted as text, the newest written is last, also after a worker
#: that started fresh wrote checkpoints of earlier event time than the ones before it.
_NAME = re.compile(r"^(\d{10})-(\d{20})\.ckpt$")


class CheckpointError(Exception):
    """A checkpoint that cannot be used; the message is one line that names the file and why."""


@dataclass(frozen=True)
class Owner:
    """Whose checkpoints these are: a file of another owner is foreign."""

    workflow: str
    worker: str
    type: str


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    event_ts: int
    payload: bytes


#: Per output: the index its next tuple gets, and the oldest index a holder has not read (None: no holder).
Outputs = dict[str, tuple[int, int | None]]


def _resume_point(headers: list[tuple[Path, dict]]) -> Path | None:
    """The file a worker goes on from (see the module docstring), of files oldest first with their headers."""
    if not headers:
        return None
    bounds = {name: unread for name, (_next, unread) in headers[-1][1].get("outputs", {}).items()
              if unread is not None}
    for path, header in reversed(headers):
        outputs = header.get("outputs", {})
        if all(outputs.get(name, (0, None))[0] <= bound for name, bound in bounds.items()):
            return path
    return headers[0][0]  # a reader behind every checkpoint kept: the oldest one is the closest


def folder_name(worker: str) -> str:
    """A worker's folder under the state directory: its name made safe for a path, plus a hash (names may differ
    only in characters the safe form drops)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", worker)[:60]
    return f"{safe}-{hashlib.sha256(worker.encode()).hexdigest()[:10]}"


class CheckpointFiles:
    """The checkpoints of one worker in ``state_dir``."""

    def __init__(self, state_dir: Path, owner: Owner, keep: int = DEFAULT_KEEP) -> None:
        if keep < 1:
            raise ValueError("keep at least one checkpoint")
        self.owner = owner
        self.folder = Path(state_dir) / folder_name(owner.worker)
        self.keep = keep
        self._sequence = 0
        self.written = 0
        self.bytes_written = 0

    def files(self) -> list[Path]:
        """Checkpoint files, oldest first (temporary files of an interrupted write are not among them)."""
        if not self.folder.is_dir():
            return []
        return sorted(p for p in self.folder.iterdir() if _NAME.match(p.name))

    def write(self, event_ts: int, payload: bytes, outputs: Outputs | None = None) -> Path:
        """Store ``payload`` as the checkpoint at ``event_ts``, atomically; drop what is older than both the
        newest ``keep`` files and the one a worker would go on from (``outputs``: see ``Outputs``)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        existing = self.files()
        if existing and self._sequence == 0:  # continue the numbering of a restarted worker
            self._sequence = int(_NAME.match(existing[-1].name).group(1)) + 1  # type: ignore[union-attr]
        path = self.folder / f"{self._sequence:010d}-{max(event_ts, 0):020d}{SUFFIX}"
        self._sequence += 1
        header = {"format": FORMAT, "workflow": self.owner.workflow, "worker": self.owner.worker,
                  "type": self.owner.type, "event_ts": event_ts, "bytes": len(payload),
                  "sha256": hashlib.sha256(payload).hexdigest(), "outputs": outputs or {}}
        temporary = path.with_name(f".{path.name}.tmp")
        with temporary.open("wb") as out:
            out.write(MAGIC + orjson.dumps(header) + b"\n")
            out.write(payload)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
        _fsync_folder(self.folder)
        files = self.files()
        needed = _resume_point(self._headers(files))
        oldest_kept = min(len(files) - self.keep, files.index(needed) if needed in files else len(files))
        for old in files[: max(0, oldest_kept)]:
            old.unlink(missing_ok=True)
        self.written += 1
        self.bytes_written += len(payload)
        return path

    def latest(self) -> Checkpoint | None:
        """The checkpoint to go on from (the newest, unless a reader is behind it; see the module docstring),
        checked whole (None: there is none). Raises ``CheckpointError`` if it is bad: another one is not taken
        silently instead."""
        files = self.files()
        if not files:
            return None
        newest = self.load(files[-1])  # checked whole first: its header decides
        chosen = _resume_point(self._headers(files))
        return newest if chosen in (None, files[-1]) else self.load(chosen)  # type: ignore[arg-type]

    def _headers(self, files: list[Path]) -> list[tuple[Path, dict]]:
        """The files' headers (a file whose header cannot be read is left out)."""
        headers = []
        for path in files:
            try:
                with path.open("rb") as source:
                    if source.readline() == MAGIC:
                        header = orjson.loads(source.readline())
                        if isinstance(header, dict):
                            headers.append((path, header))
            except (OSError, orjson.JSONDecodeError):
                continue
        return headers

    def load(self, path: Path) -> Checkpoint:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise CheckpointError(f"checkpoint {path}: cannot be read ({exc.strerror})") from None
        if not data.startswith(MAGIC):
            raise CheckpointError(f"checkpoint {path}: not a PAN checkpoint")
        end = data.find(b"\n", len(MAGIC))
        try:
            header = orjson.loads(data[len(MAGIC):end]) if end > 0 else None
        except orjson.JSONDecodeError:
            header = None
        if not isinstance(header, dict):
            raise CheckpointError(f"checkpoint {path}: its header is damaged")
        if header.get("format") != FORMAT:
            raise CheckpointError(f"checkpoint {path}: format {header.get('format')!r}, this PAN reads {FORMAT}")
        theirs = (header.get("workflow"), header.get("worker"), header.get("type"))
        ours = (self.owner.workflow, self.owner.worker, self.owner.type)
        if theirs != ours:
            raise CheckpointError(f"checkpoint {path}: belongs to worker {theirs[1]!r} ({theirs[2]}) of workflow "
                                  f"{theirs[0]!r}, not to {ours[1]!r} ({ours[2]}) of {ours[0]!r}")
        payload = data[end + 1:]
        size, event_ts = header.get("bytes"), header.get("event_ts")
        if type(size) is not int or type(event_ts) is not int:
            raise CheckpointError(f"checkpoint {path}: its header is damaged")
        if len(payload) != size:
            raise CheckpointError(f"checkpoint {path}: truncated ({len(payload)} of {size} bytes)")
        if hashlib.sha256(payload).hexdigest() != header.get("sha256"):
            raise CheckpointError(f"checkpoint {path}: corrupt (its SHA-256 does not match)")
        return Checkpoint(path, event_ts, payload)


def _fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
