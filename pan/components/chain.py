"""A workflow's ordered components chained in one process: no network, no ordering units.

What is left of a workflow when every cost but the components' own work is
taken away: its ordered components (``OrderedComponent``; forwarders and
repeaters only move streams, so they are left out) built as `pan.components.testing`
builds one, fed the streams from outside the network (``sources``) step by
step in event time, and each other's outputs as they appear. A component's
events go to ``process`` merged by (ts, input position), as an ordering unit
with nothing late releases them, and only once every input has passed them:
an outside stream up to the step's limit, another component's output up to
that component's ``watermark``. The same inputs therefore give the same
outputs as the running workflow; ``pan bench floor`` measures this as the
ceiling of the distributed runs.

A source stream may come as record batches (``arrow_pages``' columns): a
component that takes column inputs (``OrderedComponent.column_fields``) gets
their rows as ids of its row store, as a worker's pulls of Arrow pages give
them, any other one their tuples.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from pan.components.base import Component
from pan.components.ordered import OrderedComponent
from pan.components.testing import OutputReader, build_component
from pan.config.specs import Workflow
from pan.wire import arrow_pages
from pan.wire.progress import END_OF_STREAM

__all__ = ["ChainError", "ComponentChain"]

Tuple = dict[str, Any]


class ChainError(Exception):
    """The workflow cannot be chained (a cycle between components) or the chain lost tuples."""


@dataclass
class Link:
    """One component of the chain, what it waits for, and the limit up to which its input is processed."""

    name: str
    component: OrderedComponent
    inputs: list[str]
    pending: dict[str, list[Tuple]] = field(default_factory=dict)
    limit: int = -1  # every input tuple with ts <= limit has been processed


class ComponentChain:
    """The ordered components of ``workflow`` in one process, fed by ``advance`` and ended by ``finish``."""

    def __init__(self, workflow: Workflow) -> None:
        links: dict[str, Link] = {}
        for spec in workflow.workers:
            component = build_component(spec.type, spec.params, spec.inputs, spec.buffer_size)
            if isinstance(component, OrderedComponent):
                links[spec.name] = Link(spec.name, component, list(component.ctx.inputs))
        self.producer: dict[str, Link] = {out: link for link in links.values() for out in link.component.ctx.outputs}
        self.links = self._in_dependency_order(list(links.values()))
        #: Streams that come from outside the chain (what forwarders receive): what ``advance`` takes.
        self.sources = sorted({s for link in self.links for s in link.inputs if s not in self.producer})
        #: One reader per consumer and input: each component reads another's output at its own pace.
        self._readers = {(link.name, s): OutputReader(self.producer[s].component, s)
                         for link in self.links for s in link.inputs if s in self.producer}
        self.fed = 0  # source tuples taken in

    def _in_dependency_order(self, links: list[Link]) -> list[Link]:
        done: dict[str, Link] = {}
        while len(done) < len(links):
            ready = [link for link in links if link.name not in done and all(
                s not in self.producer or self.producer[s].name in done for s in link.inputs)]
            if not ready:
                raise ChainError("the workflow's components form a cycle: "
                                 + ", ".join(link.name for link in links if link.name not in done))
            done.update((link.name, link) for link in ready)
        return list(done.values())

    def advance(self, tuples: Mapping[str, Any], limit: int) -> None:
        """Take source tuples (each stream's in ts order, a list of tuples or a record batch; every one with
        ts <= ``limit`` must be in this or an earlier call, later ones may come early and wait) and let every
        component process what all its inputs have passed."""
        self.fed += sum(len(tuples[s]) for s in self.sources if s in tuples)
        for link in self.links:
            bound = END_OF_STREAM
            for name in link.inputs:
                producer = self.producer.get(name)
                if producer is None:
                    new = _items(link.component, tuples.get(name, []))
                    passed = limit + 1
                else:
                    new = self._read(link.name, name)
                    passed = producer.component.watermark(name, producer.limit) if producer.limit >= 0 else -1
                    if producer.limit == END_OF_STREAM:
                        passed = END_OF_STREAM
                if new:
                    link.pending.setdefault(name, []).extend(new)
                bound = min(bound, passed)
            self._release(link, bound)

    def finish(self) -> None:
        """End every source: everything still held is processed, as at the end of a replay."""
        self.advance({}, END_OF_STREAM - 1)  # every input passes END_OF_STREAM: each component's end follows

    def _read(self, consumer: str, stream: str) -> list[Tuple]:
        reader = self._readers[consumer, stream]
        new = reader.new()
        if reader.missed:
            raise ChainError(f"{stream}: {reader.missed} tuples overwritten before the next component read them "
                             "(raise the producer's buffer_size)")
        return new

    @staticmethod
    def _release(link: Link, bound: int) -> None:
        """Process the pending tuples (or row ids) with ts < ``bound``, in (ts, input position) order."""
        if bound - 1 <= link.limit:
            return
        released: list[tuple[int, Any]] = []  # (ts, item) of every input, in input position order
        for name in link.inputs:
            held = link.pending.get(name)
            if not held:
                continue
            timed = list(zip(link.component.items_ts(held), held, strict=True))
            if timed[-1][0] < bound:
                released += timed
                link.pending[name] = []
            else:
                released += [pair for pair in timed if pair[0] < bound]
                link.pending[name] = [item for ts, item in timed if ts >= bound]
        released.sort(key=_TS)  # stable: ties keep input position order, as an ordering unit releases them
        if released:
            link.component.process([item for _ts, item in released])
        link.limit = END_OF_STREAM if bound >= END_OF_STREAM else bound - 1
        link.component.on_release_point(link.limit)

    def components(self) -> dict[str, Component]:
        """Worker name -> its component, in the order they run."""
        return {link.name: link.component for link in self.links}


_TS = itemgetter(0)


def _items(component: OrderedComponent, given: Any) -> list[Any]:
    """A source's new tuples for ``component``: a record batch becomes row ids of its row store (column inputs)
    or its tuples."""
    if isinstance(given, list):
        return given
    if component.row_store is not None:
        return component.row_store.add(given)
    return arrow_pages.batch_tuples(given)

