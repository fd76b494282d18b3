"""The fault schedule of `pan bench chaos`: a seeded list of faults, pure and deterministic (``make_schedule``)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

FAULT_KINDS = ("pause", "restart", "drop", "stall")
#: A paused producer stalls the lockstep feed and its consumers' inputs. Ordering units treat an input
#: silent for their ``idle_timeout`` (5 s in the shipped workflows) as idle and move on without it, which
#: changes outputs by design, so producers are paused for well under that.
PRODUCER_PAUSE_S = (0.5, 2.5)
#: Pauses of the repository and of repeaters: nothing downstream depends on their timing.
OTHER_PAUSE_S = (0.5, 4.0)
#: Down time of a killed process before its replacement starts.
RESTART_DOWN_S = (0.2, 2.0)
#: A stall pauses the consumer long enough for the tight buffers to overwrite tuples it has not fetched
#: yet: those losses must all come back as reported gaps.
STALL_S = (6.0, 10.0)
FIRST_FAULT_S = 2.0  # after the feed started: the workflow is busy by then


@dataclass(frozen=True)
class Fault:
    """One planned fault.

    ``duration_s``: for a pause, SIGSTOP to SIGCONT; for a restart, the down
    time between SIGKILL and the replacement's start; 0 for a drop (every
    established TCP connection of the process's HTTP ports is aborted at once).
    """

    kind: str
    target: str
    at_s: float  # planned start, seconds after the feed started
    duration_s: float

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": self.target, "at_s": round(self.at_s, 3),
                "duration_s": round(self.duration_s, 3)}


def make_schedule(
    seed: int, targets: dict[str, list[str]], window_s: float, count: int, producers: frozenset[str] = frozenset()
) -> list[Fault]:
    """``count`` faults spread over ``window_s`` seconds, the same for the same arguments.

    ``targets``: kind -> process names it may hit (a kind without targets is
    left out). Kinds take turns before the shuffle, so every kind appears once
    ``count`` reaches the number of kinds. ``producers`` get the short pauses;
    a stall pauses the consumer for ``STALL_S``.
    """
    kinds = [kind for kind in FAULT_KINDS if targets.get(kind)]
    if count <= 0 or not kinds:
        return []
    rng = random.Random(f"pan-chaos:{seed}")
    order = [kinds[n % len(kinds)] for n in range(count)]
    rng.shuffle(order)
    slot = max(window_s - FIRST_FAULT_S, 0.0) / count
    faults = []
    for n, kind in enumerate(order):
        target = rng.choice(sorted(targets[kind]))
        at_s = FIRST_FAULT_S + n * slot + rng.uniform(0.0, slot / 2)
        if kind == "pause":
            low, high = PRODUCER_PAUSE_S if target in producers else OTHER_PAUSE_S
            duration = rng.uniform(low, high)
        elif kind == "restart":
            duration = rng.uniform(*RESTART_DOWN_S)
        elif kind == "stall":
            duration = rng.uniform(*STALL_S)
        else:
            duration = 0.0
        faults.append(Fault(kind, target, round(at_s, 3), round(duration, 3)))
    return faults
