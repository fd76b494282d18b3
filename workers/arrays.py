"""The ``arrays`` param: a component computes on numpy arrays (default) or event by event.

Both paths give byte-identical outputs; the per-event one stays as the
reference the tests compare the array path with, and ``pan bench floor``
times them side by side.
"""

from __future__ import annotations

from pan.specs import WorkerSpec

PARAM = "arrays"


def arrays_param(spec: WorkerSpec) -> tuple[bool, list[str]]:
    """Whether ``spec`` asks for the array path (default True), and problems with the param."""
    value = spec.params.get(PARAM, True)
    if type(value) is not bool:
        return True, [f"{PARAM}: must be true (numpy arrays) or false (event by event), got {value!r}"]
    return value, []
