"""How an ordering unit's clock moves: the two clock modes, promises and the end of streams.

Apart from the rest of the unit (pan/ordering/unit.py): in ``max`` mode clock streams drive clk (fallback
streams once they have ended), in ``watermark`` mode the slowest running stream does; a promise is progress.
"""

from __future__ import annotations

import numpy as np

from pan.ordering.delays import DelayMeasurement, delays
from pan.ordering.released import Released
from pan.ordering.runs import StreamRuns
from pan.ordering.settings import is_int
from pan.wire.progress import END_OF_STREAM


class ClockModes(StreamRuns, DelayMeasurement):
    """The part of ``OrderingUnit`` that moves clk, from data, promises and ends, and releases when it moved.

    Its state is set up in ``OrderingUnit.__init__`` (pan/ordering/unit.py), where each field is explained.
    """

    streams: tuple[str, ...]
    _clock_set: set[str]
    _fallback_set: set[str]
    _is_clock: list[bool]
    _watermark: bool
    _promised: list[int | None]
    _ended: list[bool]
    _n_ended: int
    _prog: list[int | None]
    _clock_advances: int
    _promise_advances: int
    _end_flushes: int

    def _push_watermark(self, pos: int, tss: list[int] | np.ndarray, old_max: int | None,
                        in_order: bool) -> Released:
        """clk = the slowest active stream's progress; K only has to cover disorder within a stream.

        Every input stream is nearly sorted by ts, so once each stream has passed
        t nothing older than t can still come, except out of order within its own
        stream; that is what the delays measure here (against the stream's own
        running maximum). Late events then depend on disorder inside streams, not
        on how fast each stream happens to be delivered, which keeps output
        identical from run to run.
        """
        running = old_max if old_max is not None else int(tss[0])
        if in_order and tss[0] >= running:
            self._record_zeros(len(tss))
        else:
            ds, _ = delays(running, tss)
            if len(tss) > len(ds):
                self._record_zeros(len(tss) - len(ds))
            if ds:
                self._record(ds, pos)
        self._update_k()
        return self._advance_watermark()

    def promise(self, stream: str, ts: int) -> Released:
        """The producer of ``stream`` guarantees nothing older than ``ts`` will follow.

        A promise is progress, never a delay measurement: it moves the watermark
        (watermark mode) or, on a clock stream, clk (max mode), so a quiet or
        sparse stream does not hold the unit back. ``ts >= END_OF_STREAM`` ends
        the stream: it stops counting, and once every input has ended everything
        buffered is released. Events that still come for a stream are handled as
        usual (older than what was released: late, and counted).
        """
        pos = self._pos.get(stream)
        if pos is None:
            raise ValueError(f"unknown input stream {stream!r}")
        if not is_int(ts):
            return Released()  # not a promise (a producer's meta is not trusted to be well-formed)
        if ts >= END_OF_STREAM:
            if self._ended[pos]:
                return Released()
            self._ended[pos] = True
            self._n_ended += 1
            if self.ended:
                self._end_flushes += 1
                return self._release(everything=True)
            self._refresh_clock()
            return self._advance_watermark() if self._watermark else self._advance_clock()
        current = self._promised[pos]
        if current is not None and ts <= current:
            return Released()
        self._promised[pos] = ts
        prog = self._prog[pos]
        if prog is None or ts > prog:
            self._prog[pos] = ts
        if self._watermark:
            return self._advance_watermark()
        if self._is_clock[pos] and not self._ended[pos]:
            return self._advance_clock()
        return Released()

    @property
    def ended(self) -> bool:
        """Every input has promised its end (and sent nothing since)."""
        return self._n_ended == len(self._ended)

    @property
    def release_limit(self) -> int | None:
        """Every event with ts up to this value has been released (None before the first clock).

        ``END_OF_STREAM`` once every input has ended.
        """
        if self.ended:
            return END_OF_STREAM
        if self._clk is None:
            return None
        return self._clk - self._k - self._tie

    def _progress(self, pos: int) -> int | None:
        """How far a stream is known to have come: its largest ts or promise."""
        return self._prog[pos]

    def _refresh_clock(self) -> None:
        """Max mode: the clock streams still running; once all have ended, the fallback streams take over."""
        if self._watermark:
            return
        names = self.streams
        live = [s in self._clock_set and not e for s, e in zip(names, self._ended, strict=True)]
        if not any(live):
            live = [s in self._fallback_set and not e for s, e in zip(names, self._ended, strict=True)]
        if live != self._is_clock:
            self._is_clock = live
            # Waiting measurements may now belong to a clock stream: they are not measured.
            self._unmeasured += self._pending_n
            self._pending.clear()
            self._pending_n = 0

    def _advance_clock(self) -> Released:
        """Max mode: clk = the largest progress (ts or promise) of a running clock stream."""
        progress = [t for i, c in enumerate(self._is_clock) if c and (t := self._progress(i)) is not None]
        if not progress or (self._clk is not None and max(progress) <= self._clk):
            return Released()
        self._clk = max(progress)
        self._clock_advances += 1
        self._promise_advances += 1
        # A promise says how far a stream has come, not when (an idle promise comes idle_after_ms late
        # by design): events waiting for their measurement are measured against the clk they found
        # when they came, which is exactly how far behind they were, the delay K must cover.
        if self._pending:
            self._measure_pending(None)
            self._update_k()
        return self._release()

    def _advance_watermark(self) -> Released:
        """Move clk to the minimum progress over streams that have not ended (unseen ones block)."""
        if self.ended:
            return self._release(everything=True)
        progress = self._prog
        if self._n_ended:
            progress = [p for p, e in zip(progress, self._ended, strict=True) if not e]
        if None in progress:
            return Released()
        watermark = min(progress)  # type: ignore[type-var]
        if self._clk is None or watermark > self._clk:
            self._clk = watermark
            self._clock_advances += 1
        return self._release()
