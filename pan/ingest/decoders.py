"""Row decoders: how a forwarder reads ingest lines that are not PAN's own JSON rows.

PAN's own line format needs no decoder: a JSON object with ``stream`` and
``ts`` (``pan.ingest.server``). Any other format, say the compact CSV rows a
source sends, is a plug-in: a scenario package writes a ``RowDecoder``
subclass, registers it in the ``pan.decoders`` entry-point group (the name
of the entry point is the decoder's name), and a forwarder names it in
``params.decoder``. A forwarder that names none takes JSON lines only.

A decoder *claims* the streams its lines feed. Every row of a claimed stream
has the decoder's layout, also when it arrives as JSON (``from_json``), so a
stream's rows are all alike and the decoder is asked only once per batch how
to read a row's ``ts`` and how to store it (``RowFormat``). Rows of other
streams are JSON objects (``JSON_ROWS``).

A decoder whose lines are plain integer CSV says so with ``int_csv`` (an
``IntCsvLayout``) and ``stream_of_key``: the ingest server then parses the
lines of each read together with numpy (``pan.wire.int_csv``) and hands only the
lines that block parser leaves to ``decode``.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Container, Mapping, Sequence
from importlib.metadata import entry_points
from typing import Any, ClassVar, Protocol

from pan.buffers.tuples import encode
from pan.wire.int_csv import IntCsvLayout, RowBlock, encode_blocks

ENTRY_POINT_GROUP = "pan.decoders"

log = logging.getLogger(__name__)


class RowFormat(Protocol):
    """How the rows of one stream are read and stored: one format per stream, asked once per batch."""

    def row_ts(self, row: Any) -> int: ...

    def encode(self, index: int, row: Any) -> bytes:
        """The stored tuple: the row's fields and its index ``i``, as JSON bytes."""
        ...


class JsonRows:
    """PAN's own rows: JSON objects with ``ts``, stored with their index ``i`` added."""

    @staticmethod
    def row_ts(row: dict[str, Any]) -> int:
        return row["ts"]  # type: ignore[no-any-return]

    @staticmethod
    def encode(index: int, row: dict[str, Any]) -> bytes:
        return encode({**row, "i": index})


JSON_ROWS = JsonRows()


def encode_rows(fmt: RowFormat, start: int, rows: Sequence[Any]) -> list[bytes]:
    """The stored tuples of ``rows``, indices from ``start`` on: a parsed block all at once, else row by row."""
    if type(rows) is RowBlock:
        return rows.encode(start)
    row_encode = fmt.encode
    return [row_encode(start + n, row) for n, row in enumerate(rows)]


def encode_batches(
    batches: Mapping[str, Sequence[Any]], starts: Mapping[str, int], row_format: Callable[[str], RowFormat]
) -> dict[str, list[bytes]]:
    """Every stream's stored tuples, its indices from ``starts[stream]`` on, as ``encode_rows`` makes them.

    The streams whose rows came from one parsed block are rendered together, in one pass (``encode_blocks``).
    """
    encoded: dict[str, list[bytes]] = {}
    by_block: dict[int, list[str]] = {}
    for stream, rows in batches.items():
        if type(rows) is RowBlock:
            by_block.setdefault(id(rows.block), []).append(stream)
        else:
            encoded[stream] = encode_rows(row_format(stream), starts[stream], rows)
    for streams in by_block.values():
        blocks = [batches[stream] for stream in streams]
        rendered = encode_blocks(blocks, [starts[stream] for stream in streams])  # type: ignore[arg-type]
        encoded.update(zip(streams, rendered, strict=True))
    return {stream: encoded[stream] for stream in batches}


class Rejections(Protocol):
    """Where a decoder reports a line it refuses (``pan.ingest.lines.LineParser`` counts and logs them)."""

    def malformed(self, line: bytes) -> None: ...

    def unexpected(self, stream: str, line: bytes) -> None: ...

    def reject(self, reason: str, stream: str, line: bytes) -> None: ...


class RowDecoder(ABC):
    """Decodes one line format into rows of the streams it claims; also their ``RowFormat``.

    One instance per ingest server. ``decode`` is the hot path: it runs for
    every non-JSON line, so it should do its checks in as few Python steps as
    it can, and report each refused line to ``rejections`` (then return None).
    """

    #: Names the decoder in errors; set from the entry point's name when loaded.
    name: ClassVar[str] = ""
    #: What its rows are called in messages (a schema declared for a claimed stream is refused: it has their layout).
    row_kind: ClassVar[str] = "decoded rows"
    #: Set when every line ``decode`` accepts is this integer CSV layout, decoded as the list of its values and
    #: stored as ``int_csv.json_format() % (index, *values)``, its stream ``stream_of_key(values[key_column])``:
    #: the ingest server may then parse blocks of lines with numpy (``pan.wire.int_csv``) instead of line by line.
    int_csv: ClassVar[IntCsvLayout | None] = None

    def __init__(self, expected: Container[str], rejections: Rejections) -> None:
        self.expected = expected
        self.rejections = rejections

    @classmethod
    @abstractmethod
    def claims(cls, stream: str) -> bool:
        """Whether this decoder's lines feed ``stream`` (then every row of it has the decoder's layout)."""

    @abstractmethod
    def decode(self, line: bytes) -> tuple[str, Any] | None:
        """A non-empty, non-JSON line within the size limit as (stream, row); None once refused."""

    @abstractmethod
    def from_json(self, stream: str, row: dict[str, Any]) -> Any:
        """A JSON row for a claimed stream (without ``stream``, ``promise``, ``i``) as stored.

        Returns the row in the decoder's layout, or a ``str``: the reason it is
        refused (a ``pan.ingest.schema`` reason).
        """

    @abstractmethod
    def row_ts(self, row: Any) -> int: ...

    def stream_of_key(self, key: int) -> str:
        """The stream an ``int_csv`` line with this key feeds (whether expected or not)."""
        raise NotImplementedError(f"{type(self).__name__} reads no integer CSV blocks (int_csv is None)")

    @abstractmethod
    def encode(self, index: int, row: Any) -> bytes: ...


_DECODERS: dict[str, type[RowDecoder]] | None = None


def decoder_types() -> dict[str, type[RowDecoder]]:
    """Every installed decoder by name (``pan.decoders`` entry points), loaded once."""
    global _DECODERS
    if _DECODERS is None:
        found: dict[str, type[RowDecoder]] = {}
        for entry in entry_points(group=ENTRY_POINT_GROUP):
            try:
                cls = entry.load()
            except Exception:  # one broken plugin must not take the runtime down
                log.exception("cannot load row decoder %r", entry.value)
                continue
            if not (isinstance(cls, type) and issubclass(cls, RowDecoder)):
                log.error("row decoder %r is not a pan.ingest.decoders.RowDecoder subclass", entry.value)
                continue
            cls.name = entry.name
            found[entry.name] = cls
        _DECODERS = found
    return dict(_DECODERS)


def get_decoder_type(name: str) -> type[RowDecoder] | None:
    return decoder_types().get(name)


def claiming_decoder(streams: list[str]) -> str | None:
    """The name of an installed decoder that claims any of ``streams``, or None (old-style workflows)."""
    for name, cls in sorted(decoder_types().items()):
        if any(isinstance(stream, str) and cls.claims(stream) for stream in streams):
            return name
    return None
