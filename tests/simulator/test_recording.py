"""A recording's files read back as the lines written, plain or compressed, and count the JSON they were given."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.recording import read_lines, recorded_files, stream_file


@pytest.mark.parametrize("compress", [False, True])
def test_lines_come_back_as_written(tmp_path: Path, compress: bool) -> None:
    lines = [b'{"i":%d,"ts":%d,"x":%d}' % (i, 10**16 + i, i * 7) for i in range(50_000)]
    out = stream_file(tmp_path, "SENSOR4", compress)
    out.write(b"\n".join(lines[:10]) + b"\n")
    out.writelines(line + b"\n" for line in lines[10:])
    out.close()
    assert out.json_bytes == sum(len(line) + 1 for line in lines)
    files = recorded_files(tmp_path)
    assert list(files) == ["SENSOR4"]
    assert files["SENSOR4"].name == ("SENSOR4.jsonl.zst" if compress else "SENSOR4.jsonl")
    assert list(read_lines(files["SENSOR4"])) == lines
    if compress:
        assert files["SENSOR4"].stat().st_size < out.json_bytes / 4


def test_both_kinds_side_by_side_and_an_empty_stream(tmp_path: Path) -> None:
    for name, compress in (("A", False), ("B", True)):
        stream_file(tmp_path, name, compress).close()
    files = recorded_files(tmp_path)
    assert sorted(files) == ["A", "B"] and all(list(read_lines(path)) == [] for path in files.values())
