"""The ``arrays`` param: a component computes on numpy arrays or event by event.

Both paths give byte-identical outputs; the per-event one stays as the
reference the tests compare the array path with, and ``pan bench floor``
times them side by side. Each component picks its default by what that
benchmark measured: while rows arrive as one dict each, turning a batch into
int columns costs more than the row loops of player averages, hits and the
active ball save, so those default to the per-event path; heat maps and
running analysis, which do much more per row, default to arrays.
"""

from __future__ import annotations

from pan.specs import WorkerSpec

PARAM = "arrays"


def arrays_param(spec: WorkerSpec, default: bool = True) -> tuple[bool, list[str]]:
    """Whether ``spec`` asks for the array path (``default`` when it does not say), and problems with it."""
    value = spec.params.get(PARAM, default)
    if type(value) is not bool:
        return True, [f"{PARAM}: must be true (numpy arrays) or false (event by event), got {value!r}"]
    return value, []
