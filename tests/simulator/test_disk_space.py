"""A match or a split that does not fit is refused up front; a full disk or an interrupted split leaves nothing
half-written, and says so in one line."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from pan.cli import main
from simulator.disk_space import ROWS_PER_S, generated_bytes, room_problem
from tests.support.live_servers import wait_for

PAN = [sys.executable, "-m", "pan"]


@contextlib.contextmanager
def mounted_tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """A real filesystem of ``size`` (tmpfs) on ``folder`` while the block runs: needs root."""
    folder.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 16 MB filesystem."""
    with mounted_tmpfs(tmp_path / "small", "16m") as folder:
        yield folder


def fill_when_it_grows(watched: Path, filler: Path, stop: threading.Event) -> None:
    """Once ``watched`` holds a megabyte, take every byte left on its filesystem (another program filling the
    disk), so that the writer of ``watched`` meets a real ENOSPC."""
    while not stop.is_set():
        if watched.exists() and watched.stat().st_size > 2**20:
            with filler.open("wb") as out, contextlib.suppress(OSError):
                while True:
                    out.write(b"\0" * 2**20)
            return
        time.sleep(0.01)


@pytest.mark.process
def test_the_estimate_bounds_a_real_generated_match(tmp_path: Path) -> None:
    assert main(["generate", "--minutes", "0.2", "--seed", "3", "--out", str(tmp_path)]) == 0
    written = (tmp_path / "full-game").stat().st_size
    rows = sum(1 for _ in (tmp_path / "full-game").open("rb"))
    seconds = 0.2 * 60 + 4 * 5.0
    assert rows <= seconds * ROWS_PER_S and written <= generated_bytes(seconds)
    assert written > generated_bytes(seconds) / 2  # an upper bound, not a wild one


def test_room_problem_names_what_is_needed_and_what_is_free(tmp_path: Path) -> None:
    assert room_problem(tmp_path, 10**9, "x", free=lambda _: 2 * 10**9) is None
    problem = room_problem(tmp_path / "new" / "folder", 5 * 10**9, "the match's CSV", free=lambda _: 10**9)
    assert problem == (f"the match's CSV needs about 5.0 GB, but {tmp_path}/new/folder has 1.0 GB free: "
                       "free some space or choose another folder")


@pytest.mark.process
def test_a_whole_match_into_a_small_disk_is_refused_before_writing(small_disk: Path) -> None:
    done = subprocess.run([*PAN, "generate", "--full", "--out", str(small_disk / "game")], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "pan generate: the match's CSV needs about 5.2 GB" in done.stderr and "Traceback" not in done.stderr
    assert not (small_disk / "game").exists()


@pytest.mark.process
def test_a_real_disk_that_fills_while_generating_ends_in_one_line(tmp_path: Path) -> None:
    """The match fits when the check is made; then another program fills the disk half way through."""
    with mounted_tmpfs(tmp_path / "disk", "160m") as disk:
        assert generated_bytes(60 + 4 * 5.0) < 160 * 2**20  # the check lets it start
        game = disk / "game"
        stop = threading.Event()
        filler = threading.Thread(target=fill_when_it_grows, args=(game / "full-game", disk / "filler", stop))
        filler.start()
        try:
            done = subprocess.run([*PAN, "generate", "--minutes", "1", "--seed", "5", "--out", str(game)],
                                  capture_output=True, text=True, timeout=600)
        finally:
            stop.set()
            filler.join()
        assert (disk / "filler").exists(), "the disk was filled while the match was written"
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr
        assert (f"pan generate: the disk filled up (No space left on device); removed the partial "
                f"{game}/full-game") in done.stderr.strip().splitlines()[-1]
        assert not (game / "full-game").exists()


def test_a_disk_that_fills_while_generating_leaves_no_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Unit-level: the writer's ENOSPC is made up (the estimate is an upper bound, so a real disk refuses first)."""
    from simulator import realistic

    def fill_up(out: str, *args: object, **kwargs: object) -> None:
        (Path(out) / "full-game").write_bytes(b"1,2,3\n")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(realistic, "generate", fill_up)
    assert main(["generate", "--minutes", "1", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.strip() == (f"pan generate: the disk filled up (No space left on device); removed the partial "
                           f"{tmp_path}/full-game")
    assert not (tmp_path / "full-game").exists()


@pytest.mark.process
def test_a_split_that_does_not_fit_is_refused(small_disk: Path, tmp_path: Path) -> None:
    game = tmp_path / "game"
    assert main(["generate", "--exact", "--minutes", "0.2", "--seed", "2", "--out", str(game)]) == 0
    assert (game / "full-game").stat().st_size * 2 > 16 * 2**20, "the match must not fit twice into 16 MB"
    done = subprocess.run([*PAN, "split", str(game / "full-game"), "--out", str(small_disk / "split")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "pan split: the split needs about" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.process
@pytest.mark.timeout(600)
def test_an_interrupted_split_stops_spark_and_leaves_no_partial_split(tmp_path: Path) -> None:
    game, out = tmp_path / "game", tmp_path / "split"
    assert main(["generate", "--minutes", "1", "--seed", "4", "--out", str(game)]) == 0
    child = subprocess.Popen([*PAN, "split", str(game / "full-game"), "--out", str(out)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        me = psutil.Process(child.pid)

        def writing() -> bool:  # the job has begun to write the sorted sensors
            return (out / "_spark_out").exists() and any("java" in p.name() for p in me.children(recursive=True))

        assert wait_for(writing, timeout_s=240), "pan split's Spark job writing into its staging folder"
        family = me.children(recursive=True)
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=300)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 130, err
    assert f"pan split: interrupted; removed the partial split from {out}" in err and "Traceback" not in err
    assert not list(out.glob("SENSOR*.csv")) and not (out / "_spark_out").exists()
    assert not (out / "manifest.json").exists()
    _, alive = psutil.wait_procs(family, timeout=60)
    assert not alive, [p.cmdline() for p in alive]
