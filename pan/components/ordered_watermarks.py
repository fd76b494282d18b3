"""What an ordered component promises downstream: K, clk and the watermarks in every output's meta.

A mixin of ``OrderedComponent`` (``pan/components/ordered.py``), whose ``__init__`` sets the unit and the
snapshots: apart because turning the unit's release point into each output's promises is a job of its own,
with hooks (``on_release_point``, ``watermark``, ``raw_watermark``) a component overrides.
"""

from __future__ import annotations

import time
from typing import ClassVar

from pan.buffers.streams import OutputStream
from pan.wire.progress import END_OF_STREAM

META_INTERVAL_S = 0.005  # outputs' meta (K, clk, wm) is refreshed at most this often, unless K grew


class OutputWatermarks:
    """The outputs' meta of an ordered component, and the hooks that say what it still owes each output."""

    #: How far behind the released events an output's ts can be (e.g. a detector that
    #: reports a kick when its spike ends, stamped with its first sample). The output
    #: watermark promised downstream is the release point minus this.
    max_backdate_ps: ClassVar[int] = 0

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
        if type(self).on_release_point is not OutputWatermarks.on_release_point:
            return None
        return self.watermark(output, emitted)


__all__ = ["META_INTERVAL_S", "OutputWatermarks"]
