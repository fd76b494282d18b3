"""`/data` pages as Arrow IPC streams, the binary alternative to the JSON page (pyarrow, the extra ``arrow``).

One record batch holds the page's tuples as columns, in the order their keys
first appear; the other page fields (``status``, ``stream``, ``first``,
``last``, ``missed``, ``meta``) are one JSON object in the schema metadata
under ``pan.page``. Decoding gives exactly the dicts the JSON page decodes to:

* a column whose present values are all ints is ``int64``, all floats
  ``float64``, all strings ``utf8``, all booleans ``bool``; a tuple without the
  key is a null there;
* a column of lists whose elements are all ints (or all floats) is
  ``list<int64>`` (``list<float64>``);
* any other column (other nested values, explicit nulls, ints mixed with floats, an
  int beyond int64) holds each value's JSON bytes (field metadata
  ``pan.json``), so it still round-trips exactly;
* a page whose tuples order their keys incompatibly (no single column order
  lists every tuple's keys in its own order) is not columnar: ``encode_page``
  returns None and the server answers JSON, so a re-encoded tuple keeps its
  bytes.

pyarrow is imported lazily: without it ``available()`` is False and PAN
speaks JSON only. ``PAN_WIRE`` in the environment chooses for a process and
its children: unset (or ``auto``), servers answer Arrow to whoever asks for it,
and subscribers ask for JSON, except those that compute on columns (a
component with column inputs, pan/buffers/row_store.py); ``arrow`` makes every
subscriber ask for Arrow; ``json`` turns Arrow off in both. JSON is the subscribers' default because most
ring buffers hold encoded JSON tuples: a JSON page is a join of bytes, an Arrow
page of them costs a decode and a transpose (``pan bench wire``). Column
buffers (pan/buffers/column_ring.py) make their Arrow pages from their rows
(``encode_int_columns``), and a reader that keeps the record batch
(``decode_columns``) builds no dict per tuple either.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import cache
from itertools import chain, pairwise, repeat
from typing import Any

import orjson

ARROW_TYPE = "application/vnd.apache.arrow.stream"
PAGE_KEY = b"pan.page"
JSON_KEY = b"pan.json"
WIRE_ENV = "PAN_WIRE"  # "arrow": subscribers ask for Arrow; "json": no Arrow at all; "auto" (= unset): see above

_MISSING = object()  # a tuple without this key


class PageFormatError(ValueError):
    """An Arrow body that is not a PAN page."""


@cache
def available() -> bool:
    """pyarrow can be imported."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


WIRES = ("json", "auto", "arrow")


def _wire_env() -> str:
    return os.environ.get(WIRE_ENV, "").strip().lower()


def wire_env_problem() -> str | None:
    """Why ``PAN_WIRE`` cannot be honoured (a typo, or Arrow without pyarrow), or None: a typo must not
    silently mean the default."""
    value = _wire_env()
    if value and value not in WIRES:
        return f"{WIRE_ENV}={os.environ[WIRE_ENV]!r} is not one of {', '.join(WIRES)} (or unset)"
    if value == "arrow" and not available():
        return f"{WIRE_ENV}=arrow needs pyarrow: pip install 'pan[arrow]'"
    return None


def enabled() -> bool:
    """This process may serve Arrow pages: pyarrow is there and ``PAN_WIRE`` is not ``json``."""
    return _wire_env() != "json" and available()


def preferred() -> bool:
    """This process's subscribers ask for Arrow pages: ``PAN_WIRE=arrow`` and pyarrow is there."""
    return _wire_env() == "arrow" and available()


def column_order(tuples: list[dict[str, Any]]) -> list[str] | None:
    """An order of all keys that lists every tuple's keys in its own order, or None if there is none.

    Among the orders that fit, keys come as early as they first appear, so
    ``[{a, c}, {a, b, c}]`` gives ``a, b, c``.
    """
    shapes = list(dict.fromkeys(map(tuple, tuples)))  # each distinct key sequence once (a page has one or a few)
    if len(shapes) == 1:
        return list(shapes[0])
    first_seen: dict[str, int] = {}
    after: dict[str, set[str]] = {}  # key -> keys some tuple has right after it
    for shape in shapes:
        for key in shape:
            first_seen.setdefault(key, len(first_seen))
            after.setdefault(key, set())
        for key, following in pairwise(shape):
            after[key].add(following)
    waiting = dict.fromkeys(first_seen, 0)  # key -> keys that must come before it, not yet placed
    for followers in after.values():
        for key in followers:
            waiting[key] += 1
    ready = [key for key, count in waiting.items() if count == 0]
    order: list[str] = []
    while ready:
        key = min(ready, key=first_seen.__getitem__)
        ready.remove(key)
        order.append(key)
        for following in after[key]:
            waiting[following] -= 1
            if waiting[following] == 0:
                ready.append(following)
    return order if len(order) == len(first_seen) else None  # a cycle: two tuples order two keys both ways


def encode_page(page: dict[str, Any]) -> bytes | None:
    """The Arrow IPC stream of a decoded `/data` page, or None if it cannot be columnar (answer JSON then)."""
    import pyarrow as pa

    tuples = page.get("tuples")
    if not isinstance(tuples, list) or not all(type(t) is dict for t in tuples):
        return None
    names = column_order(tuples)
    if names is None:
        return None
    if tuples and all(len(t) == len(names) for t in tuples):  # one key order: transpose in C
        columns: list[Any] = list(zip(*map(dict.values, tuples), strict=True))
    else:
        columns = [[t.get(name, _MISSING) for t in tuples] for name in names]
    fields, arrays = [], []
    for name, values in zip(names, columns, strict=True):
        field, array = _column(pa, name, values)
        fields.append(field)
        arrays.append(array)
    return _ipc_stream(orjson.dumps({key: value for key, value in page.items() if key != "tuples"}), fields, arrays)


def encode_int_columns(header: bytes, names: Sequence[str], columns: Sequence[Any]) -> bytes:
    """The Arrow page of tuples given as int64 columns (numpy arrays, ``names`` in the tuples' key order) and
    the page's other fields as JSON (``header``): what ``encode_page`` makes of the same page, without
    building its tuples first (pan/buffers/column_ring.py)."""
    import pyarrow as pa

    if not len(columns[0]):
        return _ipc_stream(header, [], [])  # as encode_page writes an empty page: no tuples, no columns
    fields = [pa.field(name, pa.int64()) for name in names]
    return _ipc_stream(header, fields, [pa.array(column, type=pa.int64()) for column in columns])


def _ipc_stream(header: bytes, fields: list[Any], arrays: list[Any]) -> bytes:
    """One record batch of ``arrays`` (none: an empty page is the schema alone), the page's fields in the
    schema metadata."""
    import pyarrow as pa

    schema = pa.schema(fields, metadata={PAGE_KEY: header})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        if arrays:
            writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=schema))
    return sink.getvalue().to_pybytes()


_NATIVE = {int: "int64", float: "float64", str: "string", bool: "bool_"}
_NATIVE_NUMBERS = {int: "int64", float: "float64"}


@cache
def _numpy_type_ids() -> frozenset[int]:
    import pyarrow as pa

    return frozenset(t.id for t in (pa.int64(), pa.float64(), pa.bool_()))


def _column(pa: Any, name: str, values: Sequence[Any]) -> tuple[Any, Any]:
    """One column: native where every present value has one such type, else each value's JSON bytes."""
    present = set(map(type, values))
    missing = object in present  # type(_MISSING)
    present.discard(object)
    arrow_type = None
    if len(present) == 1 and (kind := _NATIVE.get(next(iter(present)))) is not None:
        arrow_type = getattr(pa, kind)()
    elif present == {list}:  # lists of ints or of floats alone (a heat map's cells) are native lists
        items = [v for v in values if v is not _MISSING] if missing else values
        kinds = set(map(type, chain.from_iterable(items)))
        if len(kinds) == 1 and (element := _NATIVE_NUMBERS.get(kinds.pop())) is not None:
            arrow_type = pa.list_(getattr(pa, element)())
    if arrow_type is not None:
        cells = [None if v is _MISSING else v for v in values] if missing else values
        try:
            return pa.field(name, arrow_type), pa.array(cells, type=arrow_type)
        except (OverflowError, pa.ArrowInvalid, pa.ArrowTypeError):
            pass  # an int beyond int64: carried as JSON
    cells = [None if v is _MISSING else orjson.dumps(v) for v in values]
    return pa.field(name, pa.binary(), metadata={JSON_KEY: b"1"}), pa.array(cells, type=pa.binary())


def decode_page(body: bytes) -> dict[str, Any]:
    """The page an Arrow body encodes, as the JSON page would decode; ``PageFormatError`` if it is not one."""
    import pyarrow as pa

    table, page = _read_page(body)
    try:
        page["tuples"] = batch_tuples(table)
    except (pa.ArrowException, orjson.JSONDecodeError, TypeError, ValueError) as exc:
        raise PageFormatError(f"not a PAN Arrow page: {exc}") from None
    return page


def batch_tuples(table: Any) -> list[dict[str, Any]]:
    """The tuples of a page's table (or record batch) as dicts, as the JSON page decodes them."""
    names = table.schema.names
    columns = [_values(field, column) for field, column in zip(table.schema, table.columns, strict=True)]
    if any(column.null_count for column in table.columns):
        return [
            {key: value for key, value in zip(names, row, strict=True) if value is not _MISSING}
            for row in zip(*columns, strict=True)
        ]
    return list(map(dict, map(zip, repeat(names), zip(*columns, strict=True))))


def decode_columns(body: bytes) -> dict[str, Any]:
    """The page an Arrow body encodes with its tuples left as columns: ``tuples`` is the record batch as sent
    (one per page; columns the JSON page could not type hold each value's JSON bytes, see above) and
    ``indices`` its ``i`` column as ints. ``PageFormatError`` if it is not a PAN page or its indices are not
    rising integers."""
    import pyarrow as pa

    table, page = _read_page(body)
    if table.num_rows == 0:
        page["tuples"], page["indices"] = [], []
        return page
    if "i" not in table.schema.names or table.schema.field("i").type != pa.int64() or table.column("i").null_count:
        raise PageFormatError("a tuple has no integer index 'i'")
    batch = table.combine_chunks().to_batches()[0]
    indices = batch.column("i").to_numpy()
    if (indices[1:] <= indices[:-1]).any():
        raise PageFormatError("the tuples' indices do not rise")
    page["tuples"], page["indices"] = batch, indices.tolist()
    return page


def _read_page(body: bytes) -> tuple[Any, dict[str, Any]]:
    """An Arrow body's table and the page fields of its schema metadata; ``PageFormatError`` if it is no page."""
    import pyarrow as pa

    try:
        reader = pa.ipc.open_stream(body)
        table = reader.read_all()
        page = orjson.loads((reader.schema.metadata or {})[PAGE_KEY])
    except (pa.ArrowException, orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise PageFormatError(f"not a PAN Arrow page: {exc}") from None
    if not isinstance(page, dict):
        raise PageFormatError("the page metadata is not a JSON object")
    return table, page


def is_batch(value: object) -> bool:
    """``value`` is a pyarrow record batch (a column page's ``tuples``; nothing decoded from JSON is one)."""
    if not available():
        return False
    import pyarrow as pa

    return isinstance(value, pa.RecordBatch)


def columns_of(page: dict[str, Any]) -> dict[str, Any]:
    """A decoded JSON page in the form ``decode_columns`` gives (for a publisher that answered JSON)."""
    encoded = encode_page(page)
    if encoded is None:
        raise PageFormatError("the page's tuples order their keys in ways no columns can hold")
    return decode_columns(encoded)


def _values(field: Any, column: Any) -> list[Any]:
    """A column's Python values, ``_MISSING`` where the tuple had no such key."""
    if field.metadata and field.metadata.get(JSON_KEY) == b"1":
        return [_MISSING if v is None else orjson.loads(v) for v in column.to_pylist()]
    if column.null_count:
        return [_MISSING if v is None else v for v in column.to_pylist()]
    if field.type.id in _numpy_type_ids():
        return column.to_numpy().tolist()  # several times faster than to_pylist, the same Python ints and floats
    if _is_number_list(field.type):
        lists = column.combine_chunks() if hasattr(column, "combine_chunks") else column  # a table's or a batch's
        flat = lists.values.to_numpy().tolist()
        return [flat[start:end] for start, end in pairwise(lists.offsets.to_numpy().tolist())]
    return column.to_pylist()


def _is_number_list(arrow_type: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_list(arrow_type) and arrow_type.value_type.id in _numpy_type_ids()
