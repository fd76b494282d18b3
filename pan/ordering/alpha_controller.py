"""``alpha: "auto"``: the controller that moves a speculative unit's alpha with the CPU that is free.

Apart from the unit (``pan/ordering/speculation.py``): it only turns busy factors into alphas.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class AlphaController:
    """Run-time adaptation of alpha to the CPU that is free (seed 002 §4.4, Algorithm 3).

    Every ``span`` the caller reports the busy factor ``b`` (the share of the span the
    component spent working). Below ``low`` there is headroom: alpha halves (more
    speculation), or, once halving would cross half the way from the last critical
    alpha to 1, steps down by ``step``. Above ``high`` speculation costs more than the
    CPU has: the current alpha is remembered and alpha goes back to 1 (buffering).
    """

    low: float = 0.8
    high: float = 0.9
    step: float = 0.05
    alpha: float = 1.0
    last_minimum: float = 1.0  # no critical alpha known yet: halve freely
    slow: bool = False
    resets: int = 0

    def update(self, busy: float) -> float:
        if busy > self.high:
            self.last_minimum, self.alpha, self.slow = self.alpha, 1.0, False
            self.resets += 1
        elif busy < self.low:
            if self.slow:
                target = self.alpha - self.step
            else:
                target = self.alpha / 2
                if (1 - self.last_minimum) / 2 > target:
                    self.slow = True
                    target = self.alpha - self.step
            self.alpha = max(0.0, target)
        return self.alpha


__all__ = ["AlphaController"]
