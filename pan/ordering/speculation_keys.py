"""The sort key of a speculative unit's buffer entries: ``ts``, input position and arrival number in one int.

Apart from the unit (``pan/ordering/speculation.py``) because the unit and its raw inputs
(``pan/ordering/raw_inputs.py``) and premature emission (``pan/ordering/emission.py``) all bisect by it.
"""

from __future__ import annotations

#: A buffer entry's sort key is one int, ``ts``, input position and arrival number packed (``sort_key``): ints
#: compare several times faster than tuples, and a busy unit bisects its buffer once per event.
_SEQ_BITS = 40
POS_BITS = 16
_TS_SHIFT = _SEQ_BITS + POS_BITS
_SEQ_MASK = (1 << _SEQ_BITS) - 1


def sort_key(ts: int, pos: int, seq: int) -> int:
    """The sort key of (ts, input position, arrival number); ``seq`` wraps after 2^40 events of one unit."""
    return (ts << _TS_SHIFT) | (pos << _SEQ_BITS) | (seq & _SEQ_MASK)


def last_key(ts: int, pos: int | None = None) -> int:
    """The largest key of ``ts`` (of input ``pos``, or of any input): a bound for ``bisect_right``."""
    if pos is None:
        return ((ts + 1) << _TS_SHIFT) - 1
    return (ts << _TS_SHIFT) | (pos << _SEQ_BITS) | _SEQ_MASK


def key_ts(key: int) -> int:
    return key >> _TS_SHIFT


def key_pos(key: int) -> int:
    return (key >> _SEQ_BITS) & ((1 << POS_BITS) - 1)


__all__ = ["POS_BITS", "key_pos", "key_ts", "last_key", "sort_key"]
