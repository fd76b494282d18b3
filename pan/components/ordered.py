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
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from pathlib import Path
from typing import IO, Any, ClassVar

import numpy as np

from pan.buffers.row_store import RowStore
from pan.buffers.streams import OutputStream, Tuple
from pan.components.base import Component, ComponentContext
from pan.components.catalog import register
from pan.components.snapshots import ComponentSnapshots
from pan.config.specs import WorkerSpec
from pan.input.channel import Cursor
from pan.ordering.speculation import AUTO, SpeculationSettings, SpeculativeUnit, validate_ordering_object
from pan.ordering.units import (
    END_OF_STREAM,
    PARAM_KEYS,
    REMOVED_KEYS,
    OrderingSettings,
    OrderingUnit,
    Released,
    load_profile,
    validate_ordering_params,
)
from pan.util.cpu_share import READERS, BusyShare
from pan.wire import arrow_pages

READ_BATCH = 2000
RECHECK_S = 0.1  # every input is looked at this often even without a wake-up (a safety net, no decision)
ALPHA_SPAN_S = 0.5  # alpha "auto": the busy factor is measured over this much wall time (seed 002 §4.4)
META_INTERVAL_S = 0.005  # outputs' meta (K, clk, wm) is refreshed at most this often, unless K grew
ORDERING_KEYS = (*PARAM_KEYS, "delay_profile", "arrival_log", "policy")
#: Detection policies (docs/policies.md): ``best_effort`` ignores lost input; under ``nfp`` (no false
#: positives) a component withholds or marks the outputs that lost input could change.
POLICIES = ("best_effort", "nfp")
ARRIVAL_LOG_HEADER = "arrival_ns,stream,ts\n"


class OrderedComponent(Component):
    """Base class; subclasses implement ``process`` and ``main_outputs``."""

    #: Component-specific params keys (the ordering keys are always allowed).
    own_params: ClassVar[tuple[str, ...]] = ()
    #: How far behind the released events an output's ts can be (e.g. a detector that
    #: reports a kick when its spike ends, stamped with its first sample). The output
    #: watermark promised downstream is the release point minus this.
    max_backdate_ps: ClassVar[int] = 0
    #: The attributes that hold the component's state. A speculative ordering unit (the worker key
    #: ``ordering: {"mode": "speculative"}``) deep-copies them before each premature event and puts the
    #: copy back to replay (pan/components/snapshots.py); streams and loggers inside are kept, not copied. None: the
    #: component cannot run speculatively, unless it overrides ``snapshot_state`` and ``restore_state``.
    state_attributes: ClassVar[tuple[str, ...] | None] = None

    # --- description ---------------------------------------------------------------

    @classmethod
    def main_outputs(cls, spec: WorkerSpec) -> list[str]:
        return []

    @classmethod
    def late_stream(cls, spec: WorkerSpec) -> str | None:
        """Where late events go under ``late_policy: side`` (None under ``deliver``)."""
        if spec.params.get("late_policy", OrderingSettings().late_policy) != "side":
            return None
        outputs = cls.main_outputs(spec)
        return f"{outputs[0] if outputs else spec.name}_late"

    @classmethod
    def output_names(cls, spec: WorkerSpec) -> list[str]:
        late = cls.late_stream(spec)
        return cls.main_outputs(spec) + ([late] if late else [])

    @classmethod
    def check_params(cls, spec: WorkerSpec) -> list[str]:
        params = spec.params
        ordering = {k: v for k, v in params.items() if k in PARAM_KEYS or k in REMOVED_KEYS}
        problems = validate_ordering_params(ordering, cls.input_names(spec))
        own = {k: v for k, v in params.items() if k not in ORDERING_KEYS and k not in REMOVED_KEYS}
        allowed = ", ".join((*cls.own_params, *ORDERING_KEYS))
        problems += [f"{k}: unknown key (allowed: {allowed})" for k in own if k not in cls.own_params]
        for key in ("delay_profile", "arrival_log"):
            if key in params and not (isinstance(params[key], str) and params[key]):
                problems.append(f"{key}: must be a file path")
        problems += cls.check_policy(spec)
        if isinstance(params.get("delay_profile"), str):
            try:
                load_profile(params["delay_profile"])
            except (OSError, ValueError) as exc:
                problems.append(f"delay_profile: {exc}")
        return problems + cls.check_own_params(spec)

    @classmethod
    def check_own_params(cls, spec: WorkerSpec) -> list[str]:
        return []

    @classmethod
    def check_ordering(cls, spec: WorkerSpec) -> list[str]:
        """Problems with the worker's ``ordering`` object, each naming its key (the parser calls this)."""
        if spec.ordering is None:
            return []
        problems = validate_ordering_object(spec.ordering)
        if not problems and cls.speculative(spec) and not cls.supports_snapshots():
            problems.append(f"ordering.mode: type {cls.type_name!r} declares no state_attributes, so it cannot "
                            "run speculatively")
        return problems

    @classmethod
    def speculative(cls, spec: WorkerSpec) -> bool:
        return isinstance(spec.ordering, dict) and spec.ordering.get("mode") == "speculative"

    @classmethod
    def reads_raw(cls, spec: WorkerSpec) -> bool:
        """A speculative unit reads its inputs raw (unless ``ordering.input_view`` is ``settled``)."""
        return cls.speculative(spec) and (spec.ordering or {}).get("input_view", "raw") == "raw"

    @classmethod
    def supports_snapshots(cls) -> bool:
        return cls.state_attributes is not None or (
            cls.snapshot_state is not OrderedComponent.snapshot_state
            and cls.restore_state is not OrderedComponent.restore_state
        )

    def snapshot_state(self) -> Any:
        """The component's state (the declared ``state_attributes``); the middleware copies it deeply."""
        return {name: getattr(self, name) for name in self.state_attributes or ()}

    def restore_state(self, state: Any) -> None:
        """Put back a copy of what ``snapshot_state`` returned (the middleware made the copy)."""
        for name, value in state.items():
            setattr(self, name, value)

    @classmethod
    def column_fields(cls, spec: WorkerSpec) -> tuple[str, ...] | None:
        """The int fields (``ts`` among them) the component computes on, if it takes its inputs as columns:
        the worker then pulls Arrow pages and ``process`` gets row ids among the tuples (pan/buffers/row_store.py).
        None (the default): every input tuple is a dict."""
        return None

    @classmethod
    def check_policy(cls, spec: WorkerSpec) -> list[str]:
        policy = spec.params.get("policy", POLICIES[0])
        return [] if policy in POLICIES else [f"policy: must be one of {', '.join(POLICIES)}, got {policy!r}"]

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
        self._cursors: dict[str, Cursor] = {}  # where this component has read each input up to
        self._arrivals: IO[str] | None = None
        self._meta_at = 0.0
        self._published_k = -1
        self.untimed_tuples = 0
        self.input_missed = 0
        self.policy: str = self.params.get("policy", POLICIES[0])
        self._input_ts: dict[str, int] = {}  # ts of the newest tuple read per input: one end of a loss's range
        self.loss_reports = 0

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

    def feed(self, stream: str, events: list[Tuple]) -> None:
        """Push one input's new events through the unit (also usable offline, in tests)."""
        if self.row_store is not None and int in (kinds := set(map(type, events))):
            self._feed_rows(stream, events, all_rows=kinds == {int})
            return
        try:
            released = self.unit.push(stream, events)
        except ValueError:  # a tuple without an integer ts: count it, keep the rest
            valid = [e for e in events if type(e.get("ts")) is int]
            self.untimed_tuples += len(events) - len(valid)
            self.ctx.log.warning("%s: %d tuples without an integer ts dropped", stream, len(events) - len(valid))
            released = self.unit.push(stream, valid)
        self._handle(released)

    def _feed_rows(self, stream: str, events: list[Any], all_rows: bool) -> None:
        """``feed`` of row ids (and of the dicts of pages that were not columns, unless ``all_rows``), whose
        ``ts`` the row store knows."""
        assert self.row_store is not None
        if all_rows and isinstance(self.unit, OrderingUnit):  # the usual batch: all rows of column pages
            ids = np.array(events, dtype=np.int64)
            self._handle(self.unit.push_rows(stream, self.row_store.ts_array(ids), ids))
            return
        tss = self.items_ts(events)
        timed = [k for k, ts in enumerate(tss) if type(ts) is int]
        if len(timed) < len(events):
            self.untimed_tuples += len(events) - len(timed)
            self.ctx.log.warning("%s: %d tuples without an integer ts dropped", stream, len(events) - len(timed))
        self._handle(self.unit.push_timed(stream, [tss[k] for k in timed], [events[k] for k in timed]))

    def items_ts(self, items: list[Any]) -> list[Any]:
        """``item_ts`` of every item, with one row-store lookup for all the row ids among them."""
        if self.row_store is None:
            return [self.item_ts(item) for item in items]
        ids = [item for item in items if type(item) is int]
        if len(ids) == len(items):  # row ids alone
            return self.row_store.ts(ids)
        id_ts = iter(self.row_store.ts(ids))
        return [next(id_ts) if type(item) is int else self.item_ts(item) for item in items]

    def item_ts(self, item: Any) -> Any:
        """An input item's ``ts``: a row id's from the row store, a tuple's own (anything, even missing)."""
        if type(item) is int and self.row_store is not None:
            return self.row_store.ts([item])[0]
        return item.get("ts") if type(item) is dict else None

    def finish(self) -> None:
        """End of input (offline runs): every input ends, as its producer's end promise would say,
        so everything still buffered is released in order and the outputs end the same way as live."""
        for name in self.ctx.inputs:
            self._handle(self.unit.promise(name, END_OF_STREAM))

    def _handle(self, released: Released) -> None:
        late = released.late
        if isinstance(late, np.ndarray):  # row ids released as an array
            late = late.tolist()
        if late and self.row_store is not None:  # row ids become tuples (before ``process`` takes those it gets)
            late = self._late_tuples(late)
        if len(released.events) and self.snapshots is None:  # a speculative unit has handed them on already
            self.process(released.events)
        if late and self.late_output is not None:
            self.late_output.extend(late)
        if late:
            self._report_late(late)
        if self.snapshots is not None:
            self.snapshots.settle(self.unit.oldest_snapshot)  # type: ignore[union-attr]
        self._publish_meta()

    def _late_tuples(self, late: list[Any]) -> list[Tuple]:
        """Late items as tuples; rows that ``process`` does not get as well (``late_policy: side``) are let go."""
        assert self.row_store is not None
        ids = [item for item in late if type(item) is int]
        if not ids:
            return late
        tuples = iter(self.row_store.tuples(ids))
        if self.late_output is not None:  # side: the late rows go to the late stream only
            self.row_store.forget(ids)
        return [next(tuples) if type(item) is int else item for item in late]

    def _publish_meta(self, force: bool = False) -> None:
        """K, clk and the watermark into every output's meta (at most every META_INTERVAL_S unless K grew)."""
        limit = self.unit.release_limit
        if limit is not None:
            self.on_release_point(limit)
            if self.snapshots is not None:  # what it emitted is final once nothing can be replayed (the end)
                self.snapshots.settle(self.unit.oldest_snapshot)  # type: ignore[union-attr]
        now = time.monotonic()
        k_grew = self.unit.k > self._published_k
        if not force and not k_grew and now - self._meta_at < META_INTERVAL_S:
            return  # many outputs x many releases: refreshing meta every time costs more than the work
        self._meta_at, self._published_k = now, self.unit.k
        progress = self.unit.progress()
        ended = self.unit.ended  # every input ended and everything is processed: so do the outputs
        emitted = self._emitted_limit()
        for name, output in self.ctx.outputs.items():
            if ended:
                raw_end = END_OF_STREAM if self.snapshots is not None else None
                progress = progress.with_watermarks(END_OF_STREAM, raw_end)
            elif limit is not None:
                wm = self._settled_watermark(output, self.watermark(name, limit))
                raw = None if emitted is None else self.raw_watermark(name, emitted)
                progress = progress.with_watermarks(wm, None if raw is None else max(wm, raw))
            output.publish(progress)

    def _emitted_limit(self) -> int | None:
        """Behind a speculative unit: how far input has reached the component, prematurely too (None:
        buffering).

        The outputs' ``raw_wm`` follows from it (``raw_watermark``), so that a speculative reader of the raw
        view can speculate past a quiet output (a detector's rare hits) as far as this worker did, not only
        as far as it settled.
        """
        if self.snapshots is None:
            return None
        return self.unit.emitted_limit  # type: ignore[union-attr]

    def _settled_watermark(self, output: OutputStream, wm: int) -> int:
        """Behind a speculative unit, ``wm`` below every tuple the output has not settled yet.

        The component's watermark counts what it has processed, prematurely too; downstream takes it as a
        promise about the settled view. A tuple emitted during speculation (e.g. a time slot closed by
        ``on_release_point``, which a replay does not repeat) can be withdrawn and emitted again, and settles
        only with the events processed before it: a watermark past it would make it late downstream.
        """
        if self.snapshots is None:
            return wm
        pending = output.unsettled_min_ts()
        return wm if pending is None or pending > wm else pending - 1

    def on_release_point(self, limit: int) -> None:
        """Every input event with ``ts <= limit`` has been processed (called after each release, before the
        outputs' watermarks are computed). A component that holds results open (a time slot, a window)
        can emit those that nothing below ``limit`` can change any more; the default holds nothing."""

    def watermark(self, output: str, limit: int) -> int:
        """The ``ts`` below which ``output`` gets no more tuples, now that input below ``limit`` is processed.

        The default trusts ``max_backdate_ps``; a component that knows exactly
        what it still owes an output can promise more, so downstream waits less.
        """
        return limit - self.max_backdate_ps

    def raw_watermark(self, output: str, emitted: int) -> int | None:
        """Behind a speculative unit: the ``ts`` below which ``output``'s raw view gets no more tuples but
        through a retraction, now that input up to ``emitted`` has reached the component, prematurely too
        (the output's ``raw_wm``; None: no promise beyond ``wm``).

        The default is ``watermark(output, emitted)``. A component that emits on release points owes what
        only settled input closes (``on_release_point`` sees settled limits only), so it promises nothing
        unless it overrides this with what its own state says.
        """
        if type(self).on_release_point is not OrderedComponent.on_release_point:
            return None
        return self.watermark(output, emitted)

    def process(self, events: list[Tuple] | np.ndarray) -> None:
        """Handle events in ``ts`` order (late ones included under ``deliver``). With column inputs, row ids
        come among them, or alone as an int64 array where the unit released a batch of ids only."""
        raise NotImplementedError

    # --- lost input (detection policies) ---------------------------------------------

    def input_lost(self, stream: str | None, count: int, ts_from: int | None, ts_to: int | None) -> None:
        """``count`` tuples of ``stream`` (None: not known) were lost to this component.

        Called for index gaps in an input (tuples missed upstream or overwritten) and
        for events the ordering unit found late. The lost tuples' ts lie between
        ``ts_from`` and ``ts_to`` when the input is in ts order (the ts of the tuples
        received around the gap; None where there is none); a late event's range is
        its own ts. Reports come before the events around them are processed. The
        default only counts; a component whose ``policy`` is ``nfp`` overrides this
        to withhold or mark the outputs the loss could change.
        """
        self.loss_reports += 1

    def _note_read(self, stream: str, item: Tuple) -> None:
        ts = self.item_ts(item)
        if type(ts) is int:
            self._input_ts[stream] = ts

    def _report_missed(self, stream: str, after: int, indices: list[int], items: list[Tuple]) -> None:
        """One ``input_lost`` per run of missing indices in a page read after index ``after``."""
        expected = after + 1
        for index, item in zip(indices, items, strict=True):
            if index > expected:
                ts = self.item_ts(item)
                self.input_lost(stream, index - expected, self._input_ts.get(stream), ts if type(ts) is int else None)
            expected = index + 1
            self._note_read(stream, item)
        if not items:
            self.input_lost(stream, 0, self._input_ts.get(stream), None)

    def _report_late(self, late: list[Tuple]) -> None:
        for item in late:
            ts = item.get("ts")
            ts = ts if type(ts) is int else None
            self.input_lost(None, 1, ts, ts)

    def counters(self) -> dict[str, Any]:
        return {
            "ordering": self.unit.metrics(),
            "untimed_tuples": self.untimed_tuples,
            "input_missed": self.input_missed,
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
