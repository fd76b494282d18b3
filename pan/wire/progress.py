"""A stream's progress: what its producer says about it besides the tuples.

Every `/data` answer carries it as the JSON object ``meta``:

* ``epoch``: the original producer's run; it changes when the producer restarts;
* ``k``: the producer's lateness bound K (ps), which downstream ordering units react to;
* ``clk``: the producer's clock (``null`` before its first clock tick);
* ``late``: how many late events the producer counted;
* ``wm``: a watermark, the promise that no older ``ts`` follows (``END_OF_STREAM`` ends the stream);
* ``raw_wm``: a speculative producer's raw watermark: no older ``ts`` follows in its raw view except
  through a retraction. Only speculative readers of the raw view use it (to speculate further ahead);
  ``wm`` stays the promise about what is final.

``StreamProgress`` is that object as a typed, immutable value, so no module spells the
keys. A producer's meta is not trusted: a value of the wrong type (``"k": "x"``, ``"wm": true``,
``"clk": null``) and a key this version does not know are kept as received in ``other`` and
encoded again unchanged, so a repeater passes on exactly what it got and the typed fields only
ever hold well-formed values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

#: ``wm`` of a stream that has ended (2^62; an ordering unit's end promise, ``pan.ordering.unit``).
END_OF_STREAM = 2**62

_NO_WATERMARK = -(2**63)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


#: The wire key of each typed field and the check its value must pass, in encoding order.
_CHECKS = {
    "epoch": lambda v: isinstance(v, str),
    "k": lambda v: _is_int(v) and v >= 0,
    "clk": _is_int,
    "late": _is_int,
    "wm": _is_int,
    "raw_wm": _is_int,
}


@dataclass(frozen=True, slots=True)
class StreamProgress:
    """The ``meta`` of a stream; None: the producer did not say (or said something malformed)."""

    epoch: str | None = None
    k: int | None = None
    clk: int | None = None
    late: int | None = None
    wm: int | None = None
    raw_wm: int | None = None
    #: What the typed fields cannot hold, as received: unknown keys and malformed values of known ones.
    other: tuple[tuple[str, Any], ...] = ()

    @property
    def ended(self) -> bool:
        """The producer promised that nothing follows (``wm`` is ``END_OF_STREAM``)."""
        return self.wm == END_OF_STREAM

    # --- wire ---------------------------------------------------------------------

    @classmethod
    def from_json(cls, meta: Mapping[str, Any] | None) -> StreamProgress:
        """The ``meta`` object of a `/data` answer (None or empty: nothing said)."""
        if not meta:
            return EMPTY
        typed: dict[str, Any] = {}
        other: list[tuple[str, Any]] = []
        for key, value in meta.items():
            check = _CHECKS.get(key)
            if check is not None and check(value):
                typed[key] = value
            else:
                other.append((key, value))
        return cls(**typed, other=tuple(other))

    def to_json(self) -> dict[str, Any]:
        """The ``meta`` object: known keys in a fixed order (typed or as received), then unknown ones."""
        out: dict[str, Any] = {}
        raw = dict(self.other)
        for key in _CHECKS:
            value = getattr(self, key)
            if value is not None:
                out[key] = value
            elif key in raw:
                out[key] = raw[key]
        out.update(raw)  # unknown keys, after the known ones (a known key keeps its place above)
        return out

    # --- changes ------------------------------------------------------------------

    def with_watermarks(self, wm: int | None, raw_wm: int | None) -> StreamProgress:
        """This progress with ``wm`` and ``raw_wm`` replaced (``dataclasses.replace`` costs 4x as much, and a
        component publishes it for every output after every release)."""
        return StreamProgress(self.epoch, self.k, self.clk, self.late, wm, raw_wm, self.other)

    def merged(self, newer: StreamProgress) -> StreamProgress:
        """This progress with every key ``newer`` states replaced by ``newer``'s value."""
        if self is EMPTY:
            return newer
        if not self.other and not newer.other:  # the usual case, without a round trip through the wire form
            return StreamProgress(
                self.epoch if newer.epoch is None else newer.epoch,
                self.k if newer.k is None else newer.k,
                self.clk if newer.clk is None else newer.clk,
                self.late if newer.late is None else newer.late,
                self.wm if newer.wm is None else newer.wm,
                self.raw_wm if newer.raw_wm is None else newer.raw_wm,
            )
        return StreamProgress.from_json({**self.to_json(), **newer.to_json()})

    def without_watermark(self) -> StreamProgress:
        """The same progress with no ``wm`` nor ``raw_wm`` at all (a stream that goes on after its end after all)."""
        other = tuple((key, value) for key, value in self.other if key not in ("wm", "raw_wm"))
        return StreamProgress(self.epoch, self.k, self.clk, self.late, None, None, other)

    def k_grew_from(self, old: StreamProgress) -> bool:
        """``k`` is larger than ``old``'s (an absent K counts as 0): downstream must hear it at once."""
        return self.k is not None and self.k > (old.k or 0)

    def wm_moved_from(self, old: StreamProgress) -> bool:
        """``wm`` or ``raw_wm`` is ahead of ``old``'s: downstream units may release or speculate more."""
        return _ahead(self.wm, old.wm) or _ahead(self.raw_wm, old.raw_wm)


def _ahead(new: int | None, old: int | None) -> bool:
    return new is not None and new > (_NO_WATERMARK if old is None else old)


EMPTY = StreamProgress()

assert tuple(_CHECKS) == tuple(f.name for f in fields(StreamProgress))[:-1]
