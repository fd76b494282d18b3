"""Checkpoint files: atomic, the newest few kept, and a bad one refused in one line, nothing of it loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from pan.state.checkpoint_files import CheckpointError, CheckpointFiles, Owner

OWNER = Owner("match", "Running team A", "running")


def test_the_newest_checkpoint_is_loaded_and_only_the_last_few_are_kept(tmp_path: Path) -> None:
    files = CheckpointFiles(tmp_path, OWNER, keep=2)
    assert files.latest() is None
    for ts in (10, 20, 30):
        files.write(ts * 10**12, f"state at {ts}".encode())
    assert len(files.files()) == 2
    latest = files.latest()
    assert latest is not None and (latest.event_ts, latest.payload) == (30 * 10**12, b"state at 30")
    again = CheckpointFiles(tmp_path, OWNER, keep=2)  # a restarted worker numbers on, never over an old file
    again.write(30 * 10**12, b"state at 30, later")
    assert again.latest().payload == b"state at 30, later"  # type: ignore[union-attr]
    assert not list(files.folder.glob(".*.tmp"))


def test_an_interrupted_write_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    files = CheckpointFiles(tmp_path, OWNER)
    files.write(1, b"good")
    (files.folder / ".0000000001-00000000000000000002.ckpt.tmp").write_bytes(b"PAN-CHECKPOINT\n{\"form")  # a crash
    assert files.latest().payload == b"good"  # type: ignore[union-attr]


@pytest.mark.parametrize(("damage", "reason"), [
    (lambda data: data[:-3], "truncated (9 of 12 bytes)"),
    (lambda data: data[:-1] + b"X", "corrupt (its SHA-256 does not match)"),
    (lambda data: b"#!/bin/sh\n" + data, "not a PAN checkpoint"),
    (lambda data: data.replace(b'"format":1', b'"format":7'), "format 7, this PAN reads 1"),
    (lambda data: data.replace(b'"bytes":12', b'"bytes":"12"'), "its header is damaged"),
    (lambda data: data.replace(b'"worker":"Running team A"', b'"worker":"Heat maps"'),
     "belongs to worker 'Heat maps' (running) of workflow 'match', not to 'Running team A' (running) of 'match'"),
])
def test_a_bad_checkpoint_is_refused_in_one_line(tmp_path: Path, damage, reason: str) -> None:  # type: ignore[no-untyped-def]
    files = CheckpointFiles(tmp_path, OWNER)
    path = files.write(5, b"twelve bytes")
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(CheckpointError) as refused:
        files.latest()
    assert str(refused.value) == f"checkpoint {path}: {reason}" and "\n" not in str(refused.value)


def test_a_checkpoint_of_another_workflow_is_foreign(tmp_path: Path) -> None:
    CheckpointFiles(tmp_path, Owner("other match", OWNER.worker, OWNER.type)).write(5, b"theirs")
    with pytest.raises(CheckpointError, match="of workflow 'other match', not to"):
        CheckpointFiles(tmp_path, OWNER).latest()


def test_a_fresh_start_after_a_refused_checkpoint_writes_newer_ones_than_it(tmp_path: Path) -> None:
    files = CheckpointFiles(tmp_path, OWNER)
    bad = files.write(90 * 10**12, b"late in the match")
    bad.write_bytes(bad.read_bytes()[:-1])
    fresh = CheckpointFiles(tmp_path, OWNER)  # the worker started fresh: event time begins again
    fresh.write(10 * 10**12, b"early")
    assert fresh.latest().payload == b"early"  # type: ignore[union-attr]


def test_a_worker_goes_on_from_the_newest_checkpoint_its_slowest_holder_has_passed(tmp_path: Path) -> None:
    files = CheckpointFiles(tmp_path, OWNER, keep=1)
    for n, (next_index, unread) in enumerate([(100, 90), (200, 150), (300, 160), (400, 250)]):
        files.write(n, f"at {next_index}".encode(), {"OUT": (next_index, unread), "QUIET": (n, None)})
    # the newest says its reader had not read 250: the one at 200 is the newest it has passed
    assert files.latest().payload == b"at 200"  # type: ignore[union-attr]
    assert len(files.files()) == 3  # it and those after it are kept, though keep=1
    files.write(9, b"at 500", {"OUT": (500, 500)})  # the reader caught up
    assert files.latest().payload == b"at 500" and len(files.files()) == 1  # type: ignore[union-attr]
