"""Components behind an ordering unit: their code sees one ``ts``-ordered stream.

``OrderedComponent`` feeds every input's new tuples into the component's
``OrderingUnit``, calls ``process`` with what the unit releases, routes late
events by the configured policy, passes each input's upstream promise (``wm``
in its ``/data`` meta) and K notices to the unit, and publishes its own K and
watermark in the meta of every output. Nothing here decides on wall time: a
slow input is waited for, a quiet one is covered by its producer's promises.

The ordering settings sit at the top level of a worker's ``params``
(``clock``, ``lambda``, ``initial_k``, ``max_k``, ``late_policy``, ``window``,
``fallback``, ``notices``, ``clock_mode``, ``min_k``; see docs/ordering.md), next to
``delay_profile`` (initial K from ``pan stats delays``) and ``arrival_log``
(record arrivals for that job).

Here the run loop and the unit it builds. The parts of their own sit beside it: the type's description and
checks (``pan/components/ordered_spec.py``), feeding the unit (``pan/components/ordered_feed.py``), the
outputs' watermarks (``pan/components/ordered_watermarks.py``) and lost input
(``pan/components/input_loss.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from pathlib import Path
from typing import IO, Any

import numpy as np

from pan.buffers.row_store import RowStore
from pan.buffers.tuples import Tuple
from pan.components import checkpoints
from pan.components.base import ComponentContext
from pan.components.catalog import register
from pan.components.input_loss import InputLoss
from pan.components.ordered_feed import OrderedFeed
from pan.components.ordered_spec import POLICIES, OrderedSpec
from pan.components.ordered_watermarks import OutputWatermarks
from pan.components.snapshots import ComponentSnapshots
from pan.config.specs import WorkerSpec
from pan.input.channel import Cursor
from pan.ordering.settings import PARAM_KEYS, OrderingSettings, load_profile
from pan.ordering.speculation import SpeculativeUnit
from pan.ordering.speculation_settings import AUTO, SpeculationSettings
from pan.ordering.unit import OrderingUnit
from pan.state.checkpoint_files import CheckpointFiles
from pan.util.cpu_share import READERS, BusyShare
from pan.wire import arrow_pages

READ_BATCH = 2000
#: Watermark mode: an input stops being read while the unit holds this many of its events and they wait for
#: a slower input. The rest waits upstream, where the publisher holds it once, encoded, for every reader (and
#: a replay's feed brake sees it), instead of as decoded tuples in every reader's unit: without this bound,
#: three units behind a fast ``ACTIVEBALL`` and a slow ``BALLHITS`` held 10 million objects in one peer.
HELD_PER_INPUT = 20_000
RECHECK_S = 0.1  # every input is looked at this often even without a wake-up (a safety net, no decision)
ALPHA_SPAN_S = 0.5  # alpha "auto": the busy factor is measured over this much wall time (seed 002 §4.4)
ARRIVAL_LOG_HEADER = "arrival_ns,stream,ts\n"


class OrderedComponent(OrderedFeed, OutputWatermarks, InputLoss, OrderedSpec):
    """Base class; subclasses implement ``process`` and ``main_outputs``."""

    # --- lifecycle -------------------------------------------------------------

    def __init__(self, ctx: ComponentContext) -> None:
        super().__init__(ctx)
        streams = list(ctx.inputs)
        settings = OrderingSettings.from_params({k: v for k, v in self.params.items() if k in PARAM_KEYS}, streams)
        if "delay_profile" in self.params:
            settings = OrderingSettings.from_profile(load_profile(self.params["delay_profile"]), streams, settings)
        late = self.late_stream(ctx.spec)
        self.late_output = ctx.outputs[late] if late else None
        self.snapshots: ComponentSnapshots | None = None
        #: ``alpha: "auto"`` with ``cpu: "loop"`` or ``"machine"``: the busy CPU share the unit backs off from
        self._cpu_share: BusyShare | None = None
        self.unit: OrderingUnit | SpeculativeUnit
        if self.speculative(ctx.spec):
            spec_outputs = {n: o for n, o in ctx.outputs.items() if o is not self.late_output}
            self.snapshots = ComponentSnapshots(self, spec_outputs)
            speculation = SpeculationSettings.from_object(ctx.spec.ordering or {})
            raw = streams if self.reads_raw(ctx.spec) else []
            self.unit = SpeculativeUnit(settings, streams, self.snapshots, speculation, raw_streams=raw)
            if speculation.alpha == AUTO and speculation.cpu in READERS:
                self._cpu_share = BusyShare(READERS[speculation.cpu]())
        else:
            self.unit = OrderingUnit(settings, streams)
        #: Rows of the inputs' column pages, where the component takes columns (not behind a speculative unit,
        #: which snapshots tuples, nor with an arrival log of tuples; Arrow must be on in this process).
        self.row_store: RowStore | None = None
        fields = self.column_fields(ctx.spec)
        if fields and self.snapshots is None and "arrival_log" not in self.params and arrow_pages.enabled():
            self.row_store = RowStore(fields)
            for channel in ctx.inputs.values():
                channel.row_store = self.row_store
        self._wake = asyncio.Event()
        self._dirty: dict[str, None] = dict.fromkeys(ctx.inputs)  # inputs to look at (a set in input order)
        self._held_back: dict[str, None] = {}  # inputs not read for now (``HELD_PER_INPUT``)
        self.held_back_rounds = 0
        self._cursors: dict[str, Cursor] = {}  # where this component has read each input up to
        self._arrivals: IO[str] | None = None
        self._meta_at = 0.0
        self._published_k = -1
        self.untimed_tuples = 0
        self.input_missed = 0
        self.policy: str = self.params.get("policy", POLICIES[0])
        self._input_ts: dict[str, int] = {}  # ts of the newest tuple read per input: one end of a loss's range
        self.loss_reports = 0
        self._checkpoints: CheckpointFiles | None = None  # where checkpoints go, if the worker takes them
        self._checkpoint_every_ps = 0
        self._next_checkpoint_ts = 0

    @property
    def cursors(self) -> dict[str, Cursor]:
        """Where this component has read each input up to (made by ``start``)."""
        return self._cursors

    def keep_checkpoints(self, files: CheckpointFiles, every_ps: int, after_ts: int | None = None) -> None:
        """Take a checkpoint each time the release point passes a multiple of ``every_ps`` of event time (after
        ``after_ts``, the restored checkpoint's), between two rounds of the run loop (pan/components/checkpoints.py)."""
        if self.snapshots is not None:
            raise ValueError("checkpoints of a worker behind a speculative unit are not supported yet")
        self._checkpoints, self._checkpoint_every_ps = files, every_ps
        self._next_checkpoint_ts = 0 if after_ts is None else self._boundary_after(after_ts)

    def _maybe_checkpoint(self, files: CheckpointFiles) -> None:
        limit = self.unit.release_limit
        if limit is None or limit < self._next_checkpoint_ts:
            return
        outputs = {name: (stream.next_index, stream.unread_from()) for name, stream in self.ctx.outputs.items()}
        files.write(limit, checkpoints.take(self), outputs)
        self._next_checkpoint_ts = self._boundary_after(limit)

    def _boundary_after(self, ts: int) -> int:
        """The first multiple of the checkpoint period after ``ts``."""
        return (ts // self._checkpoint_every_ps + 1) * self._checkpoint_every_ps

    async def start(self) -> None:
        for name, stream in self.ctx.inputs.items():
            stream.listeners.append(functools.partial(self._mark_dirty, name))
            self._cursors[name] = stream.cursor()
        if "arrival_log" in self.params:
            path = Path(self.params["arrival_log"])
            path.parent.mkdir(parents=True, exist_ok=True)
            # A local file opened once at start-up; writes are buffered (1 MiB).
            self._arrivals = path.open("w", buffering=1 << 20)  # noqa: ASYNC230
            self._arrivals.write(ARRIVAL_LOG_HEADER)

    async def stop(self) -> None:
        if self._arrivals is not None:
            self._arrivals.close()
            self._arrivals = None

    async def run(self) -> None:
        next_check = time.monotonic()
        span_start, busy = next_check, 0.0
        while True:
            self._wake.clear()
            work_start = time.perf_counter()
            # Only inputs that changed since the last round: a worker may have dozens of inputs
            # and be woken thousands of times a second, each time by one of them.
            dirty, self._dirty = self._dirty, {}
            caught_up = []
            for name in dirty:
                if self._holds_enough(name):
                    self._held_back[name] = None
                    self.held_back_rounds += 1
                    continue
                stream = self.ctx.inputs[name]
                upstream_k = stream.progress.k
                if upstream_k is not None:
                    self.unit.notice_upstream_k(name, upstream_k)
                batch = self._cursors[name].read(READ_BATCH)
                if isinstance(self.unit, SpeculativeUnit) and self.unit.reads_raw(name):
                    self._raw_input(name, batch.retracted)
                if batch.missed:  # overwritten before this component read them: never silent
                    self.input_missed += batch.missed
                    self.ctx.log.warning("%s: %d input tuples overwritten before processing", name, batch.missed)
                    self._report_missed(name, batch.after, batch.indices, batch.items)
                elif batch.items:
                    self._note_read(name, batch.items[-1])
                if batch.items:
                    if self._arrivals is not None:
                        now = time.time_ns()
                        self._arrivals.write("".join(f"{now},{name},{item['ts']}\n" for item in batch.items))
                    self.feed(name, batch.items)
                    if len(batch.items) == READ_BATCH:
                        self._mark_dirty(name)  # there is more; read it next round, after yielding
                        continue
                caught_up.append(name)
            # A producer's promise covers what it had published when it made it: apply it only once all
            # of that is in the unit (a slow pull is waited for, never overtaken), and after this round's
            # data of every input, so that a promise does not release what another input just brought.
            for name in caught_up:
                if not self._cursors[name].caught_up:
                    continue
                upstream = self.ctx.inputs[name].progress
                if upstream.wm is not None:
                    self._handle(self.unit.promise(name, upstream.wm))
                if upstream.raw_wm is not None and isinstance(self.unit, SpeculativeUnit):
                    self._handle(self.unit.raw_promise(name, upstream.raw_wm))
            if self._checkpoints is not None:
                self._maybe_checkpoint(self._checkpoints)
            for name in [n for n in self._held_back if not self._holds_enough(n)]:  # released enough: read on
                del self._held_back[name]
                self._mark_dirty(name)
            now = time.monotonic()
            busy += time.perf_counter() - work_start
            if now - span_start >= ALPHA_SPAN_S:  # alpha "auto": the share of the span spent working
                if isinstance(self.unit, SpeculativeUnit):
                    self.unit.adapt(self._busy_share(busy / (now - span_start)))
                span_start, busy = now, 0.0
            if now >= next_check:
                next_check = now + RECHECK_S
                if now - self._meta_at >= RECHECK_S:
                    self._publish_meta(force=True)  # the last release's watermark (or the end) must go out too
                for name in self.ctx.inputs:  # a safety net: every input is looked at now and then
                    self._dirty.setdefault(name)
            if not self._dirty:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, next_check - now)):
                        await self._wake.wait()
            else:
                await asyncio.sleep(0)  # let the pull tasks and HTTP handlers run

    def _holds_enough(self, name: str) -> bool:
        """The unit holds ``HELD_PER_INPUT`` events of this input that wait for a slower one: read it later."""
        unit = self.unit
        return isinstance(unit, OrderingUnit) and unit.held(name) >= HELD_PER_INPUT and unit.leads(name)

    def _busy_share(self, working: float) -> float:
        """What ``alpha: "auto"`` adapts to: the share of the span the component worked, or the busy CPU share
        of the worker's event loop (``cpu: loop``) or of the machine (``cpu: machine``) if larger: a starved
        component waits for input while every core is taken (pan/util/cpu_share.py)."""
        return working if self._cpu_share is None else max(working, self._cpu_share.busy_share())

    def _raw_input(self, name: str, retracted: int | None) -> None:
        """A raw input: first what its producer withdrew, then how far it is final (before its new tuples)."""
        unit = self.unit
        assert isinstance(unit, SpeculativeUnit)
        if retracted is not None:
            self._handle(unit.retract(name, retracted))
        settled = self.ctx.inputs[name].upstream_settled
        if settled != unit.settled_index(name):
            self._handle(unit.upstream_settled(name, settled))

    def _mark_dirty(self, name: str) -> None:
        self._dirty[name] = None
        self._wake.set()

    def process(self, events: list[Tuple] | np.ndarray) -> None:
        """Handle events in ``ts`` order (late ones included under ``deliver``). With column inputs, row ids
        come among them, or alone as an int64 array where the unit released a batch of ids only."""
        raise NotImplementedError

    def counters(self) -> dict[str, Any]:
        return {
            "ordering": self.unit.metrics(),
            "untimed_tuples": self.untimed_tuples,
            "input_missed": self.input_missed,
            "held_back_rounds": self.held_back_rounds,  # rounds an input was not read (HELD_PER_INPUT)
            "held_back": list(self._held_back),
            "policy": self.policy,
            "loss_reports": self.loss_reports,
            **({} if self.row_store is None else {"column_inputs": self.row_store.counters()}),
        }


@register
class Merge(OrderedComponent):
    """The union of the inputs, in ``ts`` order: the simplest ordered operator."""

    type_name = "merge"
    own_params = ("output",)
    state_attributes = ()  # stateless: a replay only rewinds the output

    @classmethod
    def check_own_params(cls, spec: WorkerSpec) -> list[str]:
        output = spec.params.get("output")
        if not isinstance(output, str) or not output:
            return [f"output: must name the merged stream, got {output!r}"]
        return []

    @classmethod
    def main_outputs(cls, spec: WorkerSpec) -> list[str]:
        return [spec.params["output"]]

    def __init__(self, ctx: ComponentContext) -> None:
        super().__init__(ctx)
        self.output = ctx.outputs[self.params["output"]]

    def process(self, events: list[Tuple]) -> None:
        self.output.extend(events)
