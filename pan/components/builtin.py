"""The generic components every PAN installation has: forwarder and repeater."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from pan.buffers.column_ring import ColumnOutputStream
from pan.buffers.streams import OutputStream
from pan.components.base import Component
from pan.components.catalog import register
from pan.config.specs import WorkerSpec, ingest_port, inter_pan_inputs
from pan.ingest.decoders import encode_batches, get_decoder_type
from pan.ingest.lines import Row
from pan.ingest.server import IngestServer
from pan.ingest.settings import INGEST_PARAMS, parse_ingest_params
from pan.input.channel import InputChannel
from pan.wire.int_csv import int_rows, newest_rows
from pan.wire.progress import StreamProgress

REPEAT_BATCH = 1000
IDLE_WAIT_S = 1.0


#: A forwarder's params: where rows come in, which streams they feed and how they are held, then the ingest
#: door's settings.
FORWARDER_PARAMS = ("ingest_port", "inter_pan_inputs", "column_buffers", *INGEST_PARAMS)


@register
class Forwarder(Component):
    """Turns inter-PAN input (rows sent over TCP from outside PAN) into intra-PAN streams."""

    type_name = "forwarder"

    @classmethod
    def check_params(cls, spec: WorkerSpec) -> list[str]:
        """Its port and streams, the ingest settings and declared schemas (parse_ingest_params); every problem."""
        params = spec.params
        allowed = ", ".join(FORWARDER_PARAMS)
        problems = [f"{key}: unknown key (allowed: {allowed})" for key in params if key not in FORWARDER_PARAMS]
        port = params.get("ingest_port")
        if "ingest_port" in params and (isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535):
            problems.append(f"ingest_port: must be an integer in 1..65535, got {port!r}")
        streams = params.get("inter_pan_inputs", [])
        if not isinstance(streams, list) or not all(isinstance(s, str) and s for s in streams):
            problems.append(f"inter_pan_inputs: must be an array of non-empty strings, got {streams!r}")
        elif len(set(streams)) != len(streams):
            problems.append("inter_pan_inputs: lists a stream twice")
        if not isinstance(params.get("column_buffers", True), bool):
            problems.append(f"column_buffers: must be true or false, got {params['column_buffers']!r}")
        if ("ingest_port" in params) != bool(streams):
            problems.append("ingest_port: keys 'ingest_port' and 'inter_pan_inputs' must be given together")
        return problems + parse_ingest_params(params, inter_pan_inputs(spec))[1]

    @classmethod
    def output_names(cls, spec: WorkerSpec) -> list[str]:
        return inter_pan_inputs(spec)

    @classmethod
    def make_output(cls, spec: WorkerSpec, name: str, progress: StreamProgress) -> OutputStream:
        """A stream its decoder reads as integer CSV holds its rows as numbers (``column_buffers``, default true):
        about 0.4x the memory of its JSON tuples (pan/buffers/column_ring.py)."""
        name_of_decoder = spec.params.get("decoder")  # (a bad one: check_params reported it)
        decoder = get_decoder_type(name_of_decoder) if isinstance(name_of_decoder, str) else None
        layout = None if decoder is None or not decoder.claims(name) else decoder.int_csv
        if layout is None or spec.params.get("column_buffers", True) is not True:
            return super().make_output(spec, name, progress)
        return ColumnOutputStream(name, layout, spec.buffer_size, progress, spec.buffer_bytes)

    @classmethod
    def listen_ports(cls, spec: WorkerSpec) -> dict[str, int]:
        port = ingest_port(spec)
        return {} if port is None else {"params.ingest_port": port}

    async def start(self) -> None:
        spec = self.ctx.spec
        port, streams = ingest_port(spec), inter_pan_inputs(spec)
        if port is None:
            raise ValueError(f"forwarder '{spec.name}' needs params.ingest_port")
        settings, problems = parse_ingest_params(spec.params, streams)
        if problems:
            raise ValueError(f"forwarder '{spec.name}': " + "; ".join(problems))
        self.ingest = IngestServer(spec.host, port, set(streams), self._deliver, self._promised, settings)
        await self.ingest.start()

    def _promised(self, promises: dict[str, int]) -> None:
        """Promises: no row of a stream older than its ts follows (END_OF_STREAM: none at all).

        They come from senders, or from the ingest server for a stream it
        declared idle. Passed downstream as the stream's watermark (``wm``), so
        ordering units go on past a quiet, empty or finished source without
        ever looking at wall time themselves.
        """
        for stream, ts in promises.items():
            output = self.ctx.outputs[stream]
            current = output.progress.wm
            if current is None or ts > current:
                output.publish(StreamProgress(wm=ts))

    def _deliver(self, batches: dict[str, Sequence[Row]]) -> None:
        outputs = self.ctx.outputs
        # A column buffer keeps the JSON of its newest tuples only: the older rows of a batch are not rendered.
        to_encode = dict(batches)
        starts = {stream: outputs[stream].next_index for stream in batches}
        for stream, rows in batches.items():
            output = outputs[stream]
            if type(output) is ColumnOutputStream and len(rows) > output.hot_rows:
                to_encode[stream] = newest_rows(rows, output.hot_rows)
                starts[stream] += len(rows) - output.hot_rows
        for stream, encoded in encode_batches(to_encode, starts, self.ingest.row_format).items():
            output = outputs[stream]
            if output.progress.ended:
                output.reopen()  # the stream goes on after its end after all
            if type(output) is ColumnOutputStream:
                output.extend_rows(int_rows(batches[stream], output.buffer.width), encoded)
            else:
                output.extend_encoded(encoded)

    async def stop(self) -> None:
        await self.ingest.stop()

    def counters(self) -> dict[str, Any]:
        return {"ingest_port": self.ingest.port, **self.ingest.counters.as_dict()}


@register
class Repeater(Component):
    """Republishes its inputs unchanged, indices included, for load balancing.

    A repeater at level L only pulls from publishers below L (the original
    producer is level 0), so it can never pick itself or a peer repeater of
    its own level as source: the replicator problem cannot arise.
    """

    type_name = "repeater"
    repeats = True

    @classmethod
    def check_params(cls, spec: WorkerSpec) -> list[str]:
        params = spec.params
        problems = [f"{key}: unknown key (allowed: level)" for key in params if key != "level"]
        level = params.get("level", 1)
        if isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= 1000:
            problems.append(f"level: must be an integer in 1..1000, got {level!r}")
        return problems

    @classmethod
    def output_names(cls, spec: WorkerSpec) -> list[str]:
        return list(spec.inputs)

    @classmethod
    def repeater_level(cls, spec: WorkerSpec) -> int:
        return int(spec.params.get("level", 1))

    @classmethod
    def reads_raw(cls, spec: WorkerSpec) -> bool:
        """Raw, so its copy of a speculative stream serves both views: it passes retractions and the settled
        prefix on (of a buffering producer, the raw view is the settled one)."""
        return True

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            for name, stream in self.ctx.inputs.items():
                group.create_task(self._repeat(stream, self.ctx.outputs[name]))

    @staticmethod
    async def _repeat(source: InputChannel, target: OutputStream) -> None:
        cursor = source.cursor()
        while True:
            batch = cursor.read(REPEAT_BATCH)
            if batch.restarted:  # the original producer restarted: so does this copy of its stream
                target.reset(source.progress)
            if batch.retracted is not None or source.retract_generation > target.retractions:
                # The producer withdrew tuples: so does this copy, under the producer's generation, so that
                # raw readers may fail over between the two.
                after = target.next_index - 1 if batch.retracted is None else batch.retracted
                target.rewind(after, source.retract_generation)
            target.publish(source.progress)  # epoch and K notices pass through unchanged
            for index, item in zip(batch.indices, batch.items, strict=True):
                target.append(item, index)
            settled = source.upstream_settled
            if settled is not None:
                target.settle(settled)
            if not batch.items:
                await cursor.wait(IDLE_WAIT_S)
