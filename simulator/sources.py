"""Where simulated rows come from: per-sensor files of a `pan split` folder, read in blocks.

A full game is several GB, so a sensor's file is never loaded whole: rows
are read in blocks of about a megabyte and handed out up to a timestamp
limit.  The replay's time axis (``Timeline``) lives here too, because every
sensor of a run, on every machine, must map the same ``ts`` to the same
moment.
"""

from __future__ import annotations

import contextlib
import re
from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import orjson

SENSOR_FILE = re.compile(r"^SENSOR(\d+)\.csv$")
INTERRUPTIONS_STREAM = "INTERRUPTIONS"
INTERRUPTIONS_FILE = "interruptions.csv"
# Rows are read and their ts parsed a block at a time; 128 KiB (~1,700 rows) keeps each read
# near 1 ms, so a paced replay never stalls the other sensors of its event loop for long.
BLOCK_BYTES = 1 << 17
NEWLINE = ord("\n")


@dataclass(frozen=True)
class Timeline:
    """Maps event time (ps) to replay time (ns after the start) and back.

    ``speedup`` 0 (unpaced) keeps the 1:1 scale for ordering decisions.  With
    ``gap`` = (end of first half, start of second half) the break is cut out
    of the replay: rows inside it are not sent, and the second half follows
    the first without a pause.
    """

    origin_ts: int
    speedup: float
    gap: tuple[int, int] | None = None

    @property
    def ps_per_ns(self) -> float:
        return 1000.0 * (self.speedup or 1.0)

    def due_ns(self, ts: np.ndarray) -> np.ndarray:
        rel = ts.astype(np.int64) - self.origin_ts
        if self.gap is not None:
            start, end = self.gap
            rel = np.where(ts >= end, rel - (end - start), np.where(ts > start, start - self.origin_ts, rel))
        return (rel / self.ps_per_ns).astype(np.int64)

    def due_one(self, ts: int) -> int:
        return int(self.due_ns(np.asarray([ts], dtype=np.int64))[0])

    def ts_limit(self, now_ns: float) -> int:
        """The largest ts that is due ``now_ns`` after the start."""
        if now_ns == float("inf"):
            return 2**63 - 1
        limit = self.origin_ts + int(now_ns * self.ps_per_ns)
        if self.gap is not None and limit > self.gap[0]:
            limit += self.gap[1] - self.gap[0]
        return limit


@dataclass
class SourceCounts:
    read: int = 0
    skipped: int = 0  # outside --from/--to or inside a skipped half-time break
    malformed: int = 0  # no integer ts in the second field


class _Unparsed(Exception):
    """A row whose ts a search looked at is not an integer: the block is parsed whole (`RowSource._parse_rest`)."""


class RowSource:
    """ts-ordered rows of one stream, handed out up to a limit, with filtering by ts.

    A block of rows is kept in one of two forms:

    * as read: its bytes and the end of each line (one numpy scan). A row's ts is parsed only when the search
      for a limit looks at it (a few rows per `take_block`: it starts where the last search ended), and rows go
      out as a slice of the bytes. This is the feed's form: in an unpaced replay, parsing every row's ts was
      most of the simulator's CPU.
    * parsed: every row's ts and line (a list each), malformed rows counted and dropped. A block becomes parsed
      for `take` (impairments and send logs use every row's ts), for filters (``lo``, ``hi``, ``gap``), for
      JSON lines, and when a row a search looks at has no integer ts.

    So a malformed row that no search looks at goes on to the receiver, whose ingest counts and drops it.
    """

    def __init__(self, stream: str, blocks: Iterator[bytes], lo: int | None = None,
                 hi: int | None = None, gap: tuple[int, int] | None = None, json_lines: bool = False) -> None:
        self.stream = stream
        self.json_lines = json_lines
        self._passed_hi = False
        self.counts = SourceCounts()
        self._blocks = blocks
        self._lo, self._hi, self._gap = lo, hi, gap
        self._filtered = not (lo is None and hi is None and gap is None)
        # As read: ``_data`` and ``_ends`` (each row's end offset), ``_ts`` None. Parsed: ``_ts`` and ``_lines``.
        self._data = b""
        self._ends: list[int] = []
        self._ts: list[int] | None = []
        self._lines: list[bytes] = []
        self._pos = 0
        self._last_span = 0  # rows the last search handed out: where the next one looks first
        self.exhausted = False

    @classmethod
    def from_file(cls, stream: str, path: Path, **filters: object) -> RowSource:
        return cls(stream, _file_blocks(path), **filters)  # type: ignore[arg-type]

    def _rows(self) -> int:
        return len(self._ends) if self._ts is None else len(self._ts)

    def _load(self) -> bool:
        """Read the next non-empty block; False at the end of the data."""
        for data in self._blocks:
            if not data.endswith(b"\n"):
                data += b"\n"
            ends = (np.flatnonzero(np.frombuffer(data, np.uint8) == NEWLINE) + 1).tolist()
            self.counts.read += len(ends)
            self._data, self._ends, self._ts, self._pos = data, ends, None, 0
            if self.json_lines or self._filtered:
                self._parse_rest()
            if self._rows():
                return True
            if self._hi is not None and self._passed_hi:
                break
        self.exhausted = True
        self._data, self._ends, self._ts, self._lines, self._pos = b"", [], [], [], 0
        return False

    def _parse_rest(self) -> None:
        """The block as read, from the position on, parsed: every row's ts, malformed rows dropped, filters applied."""
        if self._ts is not None:
            return
        ends, pos = self._ends, self._pos
        lines = [self._data[(ends[k - 1] if k else 0) : ends[k]] for k in range(pos, len(ends))]
        try:
            if self.json_lines:
                ts = [orjson.loads(line)["ts"] for line in lines]
            else:
                ts = [int(line.split(b",", 2)[1]) for line in lines]
        except (ValueError, IndexError, KeyError, TypeError):
            ts, lines = self._parse_slowly(lines)
        self._ts, self._lines = self._filter(ts, lines)
        self._data, self._ends, self._pos = b"", [], 0

    def _parse_slowly(self, lines: list[bytes]) -> tuple[list[int], list[bytes]]:
        ts, kept = [], []
        for line in lines:
            try:
                ts.append(int(orjson.loads(line)["ts"]) if self.json_lines else int(line.split(b",", 2)[1]))
            except (ValueError, IndexError, KeyError, TypeError):
                if line.strip():
                    self.counts.malformed += 1
                continue
            kept.append(line)
        return ts, kept

    def _filter(self, ts: list[int], lines: list[bytes]) -> tuple[list[int], list[bytes]]:
        lo, hi, gap = self._lo, self._hi, self._gap
        if not self._filtered:
            return ts, lines
        lo = -(2**63) if lo is None else lo
        hi_ = 2**63 - 1 if hi is None else hi
        g0, g1 = gap if gap is not None else (hi_, hi_)
        keep = [i for i, t in enumerate(ts) if lo <= t <= hi_ and not g0 < t < g1]
        if ts and ts[-1] > hi_:
            self._passed_hi = True  # files are sorted: nothing later can be in range
        self.counts.skipped += len(ts) - len(keep)
        if len(keep) == len(ts):
            return ts, lines
        return [ts[i] for i in keep], [lines[i] for i in keep]

    def _ts_at(self, k: int) -> int:
        """Row ``k``'s ts; `_Unparsed` for a row read as is that has none."""
        if self._ts is not None:
            return self._ts[k]
        data, end = self._data, self._ends[k]
        try:  # the second field: between the row's first two commas
            first = data.index(b",", self._ends[k - 1] if k else 0, end) + 1
            return int(data[first : data.index(b",", first, end)])
        except ValueError:
            raise _Unparsed from None

    def _span(self, limit_ts: int, max_rows: int) -> tuple[int, int, int | None]:
        """The next rows of the block (from the position to ``stop``, up to ``max_rows``) with ts <= ``limit_ts``,
        and the ts of the last (None: no row); loads the next block when this one is used up."""
        while True:
            if self._pos >= self._rows() and (self.exhausted or not self._load()):
                return self._pos, self._pos, None
            try:
                return self._search(limit_ts, self._pos, min(self._rows(), self._pos + max_rows))
            except _Unparsed:
                self._parse_rest()

    def _search(self, limit_ts: int, pos: int, end: int) -> tuple[int, int, int | None]:
        """``_span`` within rows ``pos`` to ``end`` (rows are sorted by ts): all of them, or a C bisection of a
        parsed block, or a search from a guess in a block as read."""
        newest = self._ts_at(end - 1)
        if newest <= limit_ts:
            return pos, end, newest
        if self._ts is not None:  # parsed: C's bisection
            stop = bisect_right(self._ts, limit_ts, pos, end)
            return pos, stop, self._ts[stop - 1] if stop > pos else None
        stop, newest_ = self._first_beyond(limit_ts, pos, end - 1, pos + self._last_span)
        self._last_span = stop - pos
        return pos, stop, newest_

    def _first_beyond(self, limit_ts: int, pos: int, beyond: int, guess: int) -> tuple[int, int | None]:
        """The first row from ``pos`` on with ts > ``limit_ts`` (row ``beyond`` is one), and the ts of the row
        before it (None: it is ``pos``). Searched from ``guess`` (where the last search ended, as far from its
        start: a sensor sends at a steady rate) outwards, doubling the step, then bisected: a couple of rows
        looked at when the guess is right, not the dozen of a bisection of the whole block."""
        at = min(max(guess, pos), beyond)
        low, low_ts, high = pos - 1, None, beyond  # ts at ``low`` <= limit (``pos - 1``: none yet) < ts at ``high``
        step = 1
        if (ts := self._ts_at(at)) <= limit_ts:
            low, low_ts = at, ts
            while (nxt := low + step) < high:
                if (ts := self._ts_at(nxt)) > limit_ts:
                    high = nxt
                    break
                low, low_ts, step = nxt, ts, step * 2
        else:
            high = at
            while (nxt := high - step) > low:
                if (ts := self._ts_at(nxt)) <= limit_ts:
                    low, low_ts = nxt, ts
                    break
                high, step = nxt, step * 2
        while high - low > 1:
            mid = (low + high) // 2
            if (ts := self._ts_at(mid)) <= limit_ts:
                low, low_ts = mid, ts
            else:
                high = mid
        return high, low_ts

    def take(self, limit_ts: int, max_rows: int) -> tuple[list[int], list[bytes]]:
        """Up to ``max_rows`` of the next rows with ts <= ``limit_ts``, in file order: every row's ts and line."""
        out_ts: list[int] = []
        out_lines: list[bytes] = []
        while len(out_ts) < max_rows:
            if self._pos >= self._rows() and (self.exhausted or not self._load()):
                break
            self._parse_rest()
            if self._pos >= self._rows():  # every row of the block was malformed
                continue
            pos, stop, _ = self._span(limit_ts, max_rows - len(out_ts))
            if stop == pos:
                break
            assert self._ts is not None
            if not out_ts and stop - pos == len(self._ts):
                out_ts, out_lines = self._ts, self._lines  # the whole block: no copy
            else:
                out_ts.extend(self._ts[pos:stop])
                out_lines.extend(self._lines[pos:stop])
            self._pos = stop
            if stop < len(self._ts):
                break
        return out_ts, out_lines

    def take_block(self, limit_ts: int, max_rows: int) -> tuple[int, int | None, bytes]:
        """``take`` as one piece of bytes: how many rows, the newest ts among them, and the rows' bytes."""
        pieces: list[bytes] = []
        rows, newest = 0, None
        while rows < max_rows:
            pos, stop, last = self._span(limit_ts, max_rows - rows)
            if stop == pos:
                break
            pieces.append(self._bytes(pos, stop))
            rows, newest = rows + stop - pos, last
            self._pos = stop
            if stop < self._rows():
                break
        return rows, newest, pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def _bytes(self, pos: int, stop: int) -> bytes:
        """Rows ``pos`` to ``stop`` of the block as one piece of bytes (the block itself when they are all of it)."""
        if self._ts is not None:
            return b"".join(self._lines[pos:stop])
        if pos == 0 and stop == len(self._ends):
            return self._data
        return self._data[self._ends[pos - 1] if pos else 0 : self._ends[stop - 1]]

    def peek_ts(self) -> int | None:
        while True:
            if self._pos >= self._rows() and (self.exhausted or not self._load()):
                return None
            try:
                return self._ts_at(self._pos)
            except _Unparsed:
                self._parse_rest()


def _file_blocks(path: Path) -> Iterator[bytes]:
    """The file in blocks of whole lines, about ``BLOCK_BYTES`` each (the last may lack its newline)."""
    with open(path, "rb") as f:
        rest = b""
        while chunk := f.read(BLOCK_BYTES):
            data = rest + chunk if rest else chunk
            cut = data.rfind(b"\n") + 1
            if cut:
                rest = data[cut:]
                yield data[:cut]
            else:
                rest = data
        if rest:
            yield rest


def sensor_files(data_dir: Path) -> dict[str, Path]:
    """SENSOR<sid> -> file, for every per-sensor file of a split folder, by sensor id."""
    found = {}
    for path in data_dir.iterdir():
        match = SENSOR_FILE.match(path.name)
        if match:
            found[int(match.group(1))] = path
    return {f"SENSOR{sid}": found[sid] for sid in sorted(found)}


def first_ts(data_dir: Path, files: dict[str, Path]) -> int | None:
    """The earliest ts of the whole folder, so every machine of a run shares one origin."""
    manifest = data_dir / "manifest.json"
    if manifest.is_file():
        try:
            sensors = orjson.loads(manifest.read_bytes()).get("sensors", {})
            firsts = [s["first_ts"] for s in sensors.values() if isinstance(s.get("first_ts"), int)]
            if firsts:
                return min(firsts)
        except (orjson.JSONDecodeError, AttributeError, TypeError, KeyError):
            pass
    firsts = []
    for path in files.values():
        with open(path, "rb") as f:
            for line in f:
                try:
                    firsts.append(int(line.split(b",", 2)[1]))
                    break
                except (ValueError, IndexError):
                    continue
    return min(firsts) if firsts else None


def last_ts(data_dir: Path, files: dict[str, Path]) -> int | None:
    """The latest ts of the whole folder (manifest, or each file's last line)."""
    manifest = data_dir / "manifest.json"
    if manifest.is_file():
        with contextlib.suppress(orjson.JSONDecodeError, AttributeError, TypeError, KeyError):
            sensors = orjson.loads(manifest.read_bytes()).get("sensors", {})
            lasts = [s["last_ts"] for s in sensors.values() if isinstance(s.get("last_ts"), int)]
            if lasts:
                return max(lasts)
    lasts = []
    for path in files.values():
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - 4096))
            for line in reversed(f.read().splitlines()):
                with contextlib.suppress(ValueError, IndexError):
                    lasts.append(int(line.split(b",", 2)[1]))
                    break
    return max(lasts) if lasts else None


def _row_after(f: BinaryIO, offset: int) -> tuple[int, int] | None:
    """(ts, start) of the first row that starts after ``offset`` (the first row for -1); None past the last."""
    f.seek(max(0, offset))
    if offset >= 0:
        f.readline()  # the rest of the row the offset falls in
    while line := f.readline():
        with contextlib.suppress(ValueError, IndexError):
            return int(line.split(b",", 2)[1]), f.tell() - len(line)
    return None


def rows_around(path: Path, bound: int, scan_bytes: int = 1 << 16) -> tuple[int | None, int | None]:
    """The last ts ``<= bound`` and the first ts ``> bound`` of a ts-sorted sensor file.

    A binary search over byte offsets, then a short scan: a few dozen reads even
    for a full game's file. Rows starting before ``lo`` are ``<= bound``, rows
    starting at ``hi`` or later are ``> bound``.
    """
    before = after = None
    with open(path, "rb") as f:
        lo, hi = 0, path.stat().st_size
        while hi - lo > max(2, scan_bytes):  # (3 bytes or more: every step narrows the range)
            mid = (lo + hi) // 2
            row = _row_after(f, mid)
            if row is None or row[1] >= hi:
                hi = mid + 1
            elif row[0] > bound:
                hi = row[1]
            else:
                before, lo = row[0], row[1] + 1
        row = _row_after(f, lo - 1)
        while row is not None:
            if row[0] > bound:
                after = row[0]
                break
            before = row[0]
            row = _row_after(f, row[1])
    return before, after


def halftime_break(files: dict[str, Path], half_end: int, half_start: int) -> tuple[int, int] | None:
    """The stretch of event time without data between the halves, to leave out of a paced replay.

    From the last row of the first half (at most ``half_end``, the real match's
    whistle) to the first row of the second half (at most ``half_start``): a
    shorter or generated match whose halves end earlier has its longer break
    cut as well. None if the data has rows on one side only.
    """
    middle = (half_end + half_start) // 2
    before, after = [], []
    for path in files.values():
        b, a = rows_around(path, middle)
        before += [b] if b is not None else []
        after += [a] if a is not None else []
    if not before or not after:
        return None
    return min(half_end, max(before)), min(half_start, min(after))


def interruption_lines(
    path: Path | None, heartbeat: tuple[int, int, int] | None = None
) -> list[bytes]:
    """INTERRUPTIONS events as JSON lines, ordered by ts, from ``start_ts,end_ts`` rows.

    ``heartbeat`` = (first ts, last ts, period): adds ``"event": "heartbeat"`` lines so
    the stream keeps moving in event time. A sparse stream would otherwise leave
    downstream ordering units unsure whether an interruption is still on its way.
    """
    events: list[tuple[int, int, bytes]] = []
    if heartbeat is not None:
        first, last, period = heartbeat
        for ts in range(first - first % period + period, last + 1, period):
            line = orjson.dumps({"stream": INTERRUPTIONS_STREAM, "ts": ts, "event": "heartbeat"}) + b"\n"
            events.append((ts, 2, line))
    if path is None or not path.is_file():
        path_rows: list[str] = []
    else:
        path_rows = path.read_text().splitlines()
    for number, raw in enumerate(path_rows):
        parts = raw.strip().split(",")
        if not raw.strip() or (number == 0 and not parts[0].lstrip("-").isdigit()):
            continue  # header or blank
        try:
            start, end = int(parts[0]), int(parts[1])
        except (ValueError, IndexError):
            raise ValueError(f"{path}: line {number + 1}: expected start_ts,end_ts, got {raw!r}") from None
        for ts, rank, event in ((start, 1, "begin"), (end, 0, "end")):
            line = orjson.dumps({"stream": INTERRUPTIONS_STREAM, "ts": ts, "event": event}) + b"\n"
            events.append((ts, rank, line))
    events.sort(key=lambda e: (e[0], e[1]))
    return [line for _ts, _rank, line in events]
