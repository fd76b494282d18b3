"""Pluggable ingest row decoding: decoders come from the pan.decoders entry points, a forwarder names one."""

from typing import Any

import orjson
import pytest

from pan.config.specs import WorkflowError
from pan.ingest.decoders import JSON_ROWS, RowDecoder, decoder_types
from pan.ingest.schema import MISSING_FIELD, NOT_INT64
from pan.ingest.server import IngestServer, send_lines
from pan.ingest.settings import IngestSettings
from pan.ingest.streams import Connection
from pan.repository.server import RepositoryServer
from pan.workflow.parser import parse_workflow
from simulator.debs_rows import DebsCsvDecoder
from tests.conftest import HOST, WorkerGroup, forwarder, make_workflow, sensor_row, wait_until, workflow_dict


def test_the_csv_decoder_comes_through_the_entry_point_group() -> None:
    assert decoder_types()["debs_csv"] is DebsCsvDecoder
    assert DebsCsvDecoder.name == "debs_csv"


def test_an_unknown_decoder_is_named_with_the_installed_ones() -> None:
    with pytest.raises(WorkflowError) as caught:
        parse_workflow(workflow_dict(1, [forwarder("F", ["S"], params={"decoder": "nope"})]))
    assert "worker 'F': params.decoder: unknown row decoder 'nope' (known: debs_csv)" in caught.value.problems


async def test_a_forwarder_without_a_decoder_takes_json_lines_only(
    repository: RepositoryServer, workers: WorkerGroup
) -> None:
    spec = forwarder("F", ["SENSOR4", "EVENTS"])
    del spec["params"]["decoder"]
    (worker,) = await workers.start(make_workflow(repository.port, [spec]))
    await send_lines(HOST, spec["params"]["ingest_port"], [
        sensor_row(4, 100).encode(),  # CSV: no decoder reads it
        b'{"stream": "SENSOR4", "ts": 101, "note": "any JSON row"}',  # no decoder claims SENSOR4: generic schema
        b'{"stream": "EVENTS", "ts": 102}',
    ])
    await wait_until(lambda: worker.component.counters()["rows"] == 2)
    assert worker.component.counters()["malformed"] == 1
    stored = [orjson.loads(b) for b in worker.outputs["SENSOR4"].buffer.read(-1, oldest=10).items]
    assert stored == [{"ts": 101, "note": "any JSON row", "i": 0}]


class KeyValueDecoder(RowDecoder):
    """A toy format: ``name ts value`` into streams ``KV.name``, stored as {"ts", "value"}."""

    row_kind = "key-value rows"

    @classmethod
    def claims(cls, stream: str) -> bool:
        return stream.startswith("KV.")

    def decode(self, line: bytes) -> tuple[str, Any] | None:
        parts = line.split()
        if len(parts) != 3 or not parts[1].isdigit():
            return self.rejections.malformed(line)
        stream = f"KV.{parts[0].decode()}"
        if stream not in self.expected:
            return self.rejections.unexpected(stream, line)
        if len(parts[2]) > 5:
            return self.rejections.reject(NOT_INT64, stream, line)
        return stream, (int(parts[1]), parts[2].decode())

    def from_json(self, stream: str, row: dict[str, Any]) -> Any:
        return (row["ts"], str(row["value"])) if "value" in row else MISSING_FIELD

    def row_ts(self, row: tuple[int, str]) -> int:
        return row[0]

    def encode(self, index: int, row: tuple[int, str]) -> bytes:
        return orjson.dumps({"ts": row[0], "value": row[1], "i": index})


def test_any_decoder_plugs_into_the_ingest_server() -> None:
    delivered: dict[str, list[Any]] = {}

    def deliver(batches: dict[str, list[Any]]) -> None:
        for stream, rows in batches.items():
            delivered.setdefault(stream, []).extend(rows)

    server = IngestServer(HOST, 0, {"KV.a", "PLAIN"}, deliver, settings=IngestSettings(decoder=KeyValueDecoder))
    server._deliver_lines([
        b"a 5 hello", b"a 6", b"b 7 x", b"a 8 toolong",
        b'{"stream": "KV.a", "ts": 9, "value": 3}', b'{"stream": "KV.a", "ts": 10}',
        b'{"stream": "PLAIN", "ts": 11, "value": 3}',
    ], Connection("test"))
    assert delivered == {"KV.a": [(5, "hello"), (9, "3")], "PLAIN": [{"ts": 11, "value": 3}]}
    counters = server.counters.as_dict()
    assert (counters["malformed"], counters["unexpected"]) == (1, 1)
    assert counters["rejected"] == {NOT_INT64: 1, MISSING_FIELD: 1}
    assert server.streams["KV.a"].newest == 9
    assert server.row_format("KV.a").encode(4, (9, "3")) == b'{"ts":9,"value":"3","i":4}'
    assert server.row_format("PLAIN") is JSON_ROWS
