"""How an output stream publishes its progress (K, watermark) and wakes the long polls that wait for it.

A mixin of ``OutputStream`` (pan/buffers/streams.py), whose ``__init__`` sets the state used here; apart
because when to poke meta-waiting readers is its own question, next to storing and serving tuples.
"""

from __future__ import annotations

import time

import orjson

from pan.buffers.ringbuffer import RingBuffer
from pan.wire.progress import StreamProgress

WM_POKE_INTERVAL_S = 0.005  # a moving watermark wakes (meta-waiting) long polls at most 200 times a second,
WM_QUIET_S = 0.01  # and only once the stream has appended nothing for this long: busy streams carry wm in their data


class Watermarks:
    """Progress publishing of ``OutputStream``."""

    buffer: RingBuffer[bytes]
    progress: StreamProgress
    appended: int
    _progress_json: bytes | None
    _wm_poked_at: float
    _appended_seen: int
    _data_at: float
    #: The index a producer restored from a checkpoint went on from (None: it did not): its meta says so as
    #: ``resumed``, and a reader beyond its newest index waits for it to get there again (pan/input/subscription.py).
    resumed: int | None = None

    def publish(self, progress: StreamProgress) -> None:
        """Merge what ``progress`` states and wake long polls when downstream must hear it now.

        A grown K must travel before the late events it announces; a moved
        watermark (``wm``) lets downstream units advance past a quiet stream.
        A stream that is appending needs no watermark pokes: every answer
        carries the current progress, and each poke costs every meta-waiting
        subscriber a round trip.
        """
        grew = progress.k_grew_from(self.progress)
        moved = progress.wm_moved_from(self.progress)
        self._set_progress(self.progress.merged(progress))
        now = time.monotonic()
        if self.appended != self._appended_seen:  # data went out: it carried the progress with it
            self._appended_seen, self._data_at = self.appended, now
        if grew or (moved and self.progress.ended):  # nothing follows an end to carry it: it must travel now
            self.buffer.poke()
        elif moved and self._wm_announced(now) and now - self._wm_poked_at >= WM_POKE_INTERVAL_S:
            self._wm_poked_at = now
            self.buffer.poke()

    def _wm_announced(self, now: float) -> bool:
        """A moved watermark is poked to meta-waiting readers: an end (no data follows to carry it), or the
        watermark of a stream that appended nothing for ``WM_QUIET_S``."""
        return self.progress.ended or now - self._data_at >= WM_QUIET_S

    def missed_poke(self, known_wm: int | None) -> bool:
        """A meta-waiting reader that knows the watermark ``known_wm`` (None: none) missed a poke ``publish``
        made before its long poll began: the stream has ended, or its watermark moved while it was quiet (a
        busy stream carries its watermark with its data, and pokes no one)."""
        return self.progress.wm != known_wm and self._wm_announced(time.monotonic())

    def reopen(self) -> None:
        """Withdraw the watermark without waking anyone: the stream goes on after its end after all."""
        self._set_progress(self.progress.without_watermark())

    def _set_progress(self, progress: StreamProgress) -> None:
        """Producers publish far more often than pages are served: encode once, when a page asks."""
        if progress.other or self.progress.other or progress != self.progress:  # (``True == 1`` in ``other``)
            self.progress, self._progress_json = progress, None

    def _meta_json(self) -> bytes:
        if self._progress_json is None:
            meta = self.progress.to_json()
            if self.resumed is not None:
                meta["resumed"] = self.resumed
            self._progress_json = orjson.dumps(meta)
        return self._progress_json
