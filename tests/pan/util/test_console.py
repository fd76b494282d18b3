"""`pan/util/console.py`: bars only on a terminal, a plain table off one (issue 15, item 3)."""

from __future__ import annotations

import io
import sys

import pytest

from pan.util import console


def test_no_bar_off_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    captured = io.StringIO()
    monkeypatch.setattr(sys, "stderr", captured)
    with console.progress_bar("work", 10) as bar:
        bar.update(5)
    assert not bar.shown and captured.getvalue() == ""


@pytest.mark.skipif(not console.available(), reason="rich (the progress extra) is not installed")
def test_a_forced_bar_shows_percentage_count_and_eta(monkeypatch: pytest.MonkeyPatch) -> None:
    captured = io.StringIO()
    monkeypatch.setattr(sys, "stderr", captured)
    with console.progress_bar("work", 8, unit="slices", force=True) as bar:
        bar.update(2)
    text = captured.getvalue()
    assert bar.shown and "work" in text and "25%" in text and "2/8" in text and "ETA" in text


def test_the_table_off_a_terminal_is_aligned_text() -> None:
    out = io.StringIO()
    console.table("report", ["name", "count"], [("a", 5), ("longer", 12345)], out=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "report"
    assert [line.split() for line in lines[1:]] == [["name", "count"], ["a", "5"], ["longer", "12345"]]
    assert len({len(line) for line in lines[1:]}) == 1  # right-aligned numbers: every row as wide


def test_a_list_of_named_values_has_no_header_row() -> None:
    out = io.StringIO()
    console.table("summary", ["", ""], [("rows", "12"), ("streams that missed", "none")], out=out)
    assert out.getvalue().splitlines() == ["summary", "rows                 12", "streams that missed  none"]
