"""The DEBS 2013 CSV rows as a forwarder reads them: the ``debs_csv`` row decoder.

A row is 13 integers, ``sid,ts,x,y,z,|v|,|a|,vx,vy,vz,ax,ay,az``; its first
field, the sensor id, names its stream ``SENSOR<sid>``. This is the format
``pan simulate`` sends and its debug receiver reads, which is why it lives
with the simulator; forwarders choose it with ``"params": {"decoder":
"debs_csv"}`` (entry point in pyproject.toml).

Rows are kept as lists of ints and stored as JSON objects with the field
names below, formatted directly (about twice as fast as building a dict).
"""

from __future__ import annotations

import re
import struct
from typing import Any

from pan.ingest.decoders import RowDecoder
from pan.ingest.schema import INT, NOT_INT64, STREAM_MISMATCH, TS_LIMIT, TS_OUT_OF_RANGE, Schema
from pan.wire.int_csv import IntCsvLayout

#: Field names of a CSV sensor row (JSON names); the first is the key that names the stream.
SENSOR_FIELDS = ("sid", "ts", "x", "y", "z", "v", "a", "vx", "vy", "vz", "ax", "ay", "az")
SENSOR_PREFIX = "SENSOR"
#: The CSV layout as a schema: JSON rows into a ``SENSOR<sid>`` stream must match it (all integers, no others).
CSV_SCHEMA = Schema({name: (INT, True) for name in SENSOR_FIELDS}, extra=False)
TS_COLUMN = SENSOR_FIELDS.index("ts")
#: The syntax of a CSV row: as many fields as SENSOR_FIELDS, each an integer in plain ASCII.
_CSV_ROW = re.compile(rb"-?[0-9]+(?:,-?[0-9]+){%d}" % (len(SENSOR_FIELDS) - 1))
#: Packing a CSV row's values as int64s is the cheapest range check (struct.error when one is beyond).
_INT64_ROW = struct.Struct(f"{len(SENSOR_FIELDS)}q").pack
#: The layout again, for the ingest server's block parser (pan/wire/int_csv.py): it parses many rows at once.
CSV_LAYOUT = IntCsvLayout(SENSOR_FIELDS, key_column=0, ts_column=TS_COLUMN)
_SENSOR_JSON = CSV_LAYOUT.json_format()


def sensor_key(stream: str) -> int | None:
    """The sensor id of the CSV rows that ``stream`` receives (``SENSOR4`` -> 4), or None for other streams."""
    suffix = stream.removeprefix(SENSOR_PREFIX)
    if suffix == stream or not suffix.lstrip("-").isdigit() or not suffix.isascii():
        return None
    key = int(suffix)
    return key if f"{SENSOR_PREFIX}{key}" == stream else None


class DebsCsvDecoder(RowDecoder):
    """CSV sensor rows into ``SENSOR<sid>`` streams; JSON rows into those streams must have the same fields."""

    row_kind = "CSV rows"
    int_csv = CSV_LAYOUT

    @classmethod
    def claims(cls, stream: str) -> bool:
        return sensor_key(stream) is not None

    def decode(self, line: bytes) -> tuple[str, Any] | None:
        # Each field ASCII digits with an optional minus (int() alone would also take " 5", "+5", "1_000"
        # and non-ASCII digits).
        if _CSV_ROW.fullmatch(line) is None:
            return self.rejections.malformed(line)
        values = list(map(int, line.split(b",")))
        stream = f"{SENSOR_PREFIX}{values[0]}"
        if stream not in self.expected:
            return self.rejections.unexpected(stream, line)
        try:
            _INT64_ROW(*values)
        except struct.error:
            return self.rejections.reject(NOT_INT64, stream, line)
        if not 0 <= values[TS_COLUMN] < TS_LIMIT:
            return self.rejections.reject(TS_OUT_OF_RANGE, stream, line)
        return stream, values  # counted per batch, by the server

    def from_json(self, stream: str, row: dict[str, Any]) -> list[int] | str:
        problem = CSV_SCHEMA.check(row)
        if problem is not None:
            return problem
        if row[SENSOR_FIELDS[0]] != sensor_key(stream):
            return STREAM_MISMATCH
        return [row[name] for name in SENSOR_FIELDS]  # stored exactly like the same row sent as CSV

    def stream_of_key(self, key: int) -> str:
        return f"{SENSOR_PREFIX}{key}"

    def row_ts(self, row: list[int]) -> int:
        return row[TS_COLUMN]

    def encode(self, index: int, row: list[int]) -> bytes:
        """The row's JSON tuple, formatted directly: ~2x faster than building a dict."""
        return _SENSOR_JSON % (index, *row)
